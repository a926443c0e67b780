"""What the fake Image Builder service offers, by host distro (the fake's `distro` parameter).

Modelled on osbuild/images:
- data/distrodefs/{rhel-9,fedora,rhel-10}/imagetypes.yaml: which image types each distro
  defines (RHEL 9: edge-*; Fedora: iot-*; RHEL 10: no ostree commit or installer type at
  all), their `filename`/`mime_type`, `name_aliases` (rhel-edge-commit, fedora-iot-commit)
  and the default ostree ref template "{{.Distro.Name}}/{{.Distro.MajorVersion}}/{{.Arch}}/edge"
  (".../iot" on Fedora, whose iot-installer also has a default ostree URL, a mirrorlist);
- the `blueprint.supported_options` lists of those files (supported_options_ostree_commit
  for edge-commit/iot-commit; the short installer list for edge-installer/iot-installer);
- pkg/distro/generic/distro.go: `ListImageTypes` is sorted, `GetImageType` answers
  "invalid image type: NAME"; `OsVersion()` is what the ostree commit pipeline stamps into
  the commit's `version` (pkg/manifest/commit.go OSVersion -> org.osbuild.ostree.commit
  `os_version`).

The lists of image types are the distros' x86_64 ones without the internal pseudo types
(bare_metal, edge-container-pipeline-pkgset); only the ostree ones are built by the fake.
"""

from __future__ import annotations

from dataclasses import dataclass

# pkg/distro/generic/imagetype.go SupportedBlueprintOptions: always implicitly supported.
METADATA_OPTIONS = ("name", "version", "description")

# rhel-9/imagetypes.yaml supported_options_ostree_commit (fedora's iot-commit is the same).
OSTREE_COMMIT_OPTIONS = (
    "distro", "packages", "modules", "groups", "enabled_modules", "containers",
    "customizations.dnf", "customizations.directories", "customizations.files",
    "customizations.fips", "customizations.firewall", "customizations.user",
    "customizations.sshkey", "customizations.group", "customizations.hostname",
    "customizations.kernel.name", "customizations.locale", "customizations.repositories",
    "customizations.services", "customizations.timezone", "customizations.rhsm",
)
# rhel-9 edge-installer and fedora iot-installer `blueprint.supported_options`.
OSTREE_INSTALLER_OPTIONS = (
    "distro", "customizations.installer", "customizations.user", "customizations.sshkey",
    "customizations.group", "customizations.fips", "customizations.timezone",
    "customizations.locale",
)


@dataclass(frozen=True)
class ImageType:
    name: str
    kind: str           # "commit" | "installer" | "container" | "disk"
    filename: str
    mime_type: str

    @property
    def is_ostree(self) -> bool:
        return self.kind in ("commit", "installer", "container")

    @property
    def supported_options(self) -> tuple[str, ...]:
        if self.kind == "installer":
            return (*OSTREE_INSTALLER_OPTIONS, *METADATA_OPTIONS)
        if self.kind in ("commit", "container"):
            return (*OSTREE_COMMIT_OPTIONS, *METADATA_OPTIONS)
        return ()  # not modelled: every option allowed (lenient)


@dataclass(frozen=True)
class Distro:
    key: str                 # the fake's parameter: "rhel-9", "fedora", "rhel-10"
    name: str                # canonical distro name, e.g. "rhel-9.6"
    os_id: str               # ID in os-release; {{.Distro.Name}} of the ref template
    os_version: str          # OsVersion(): stamped into ostree commits
    major: str
    ostree_types: dict[str, ImageType]
    other_types: tuple[str, ...]
    aliases: dict[str, str]
    ostree_ref_suffix: str = "edge"
    installer_default_url: str | None = None

    def list_image_types(self) -> list[str]:
        return sorted([*self.ostree_types, *self.other_types])

    def get_image_type(self, name: str) -> ImageType:
        """images pkg/distro/generic/distro.go architecture.GetImageType."""
        name = self.aliases.get(name, name)
        if name in self.ostree_types:
            return self.ostree_types[name]
        if name in self.other_types:
            return ImageType(name, "disk", "disk.img", "application/octet-stream")
        raise LookupError(f"invalid image type: {name}")

    def default_ref(self, arch: str) -> str:
        return f"{self.os_id}/{self.major}/{arch}/{self.ostree_ref_suffix}"


def _types(prefix: str) -> dict[str, ImageType]:
    return {
        f"{prefix}-commit": ImageType(f"{prefix}-commit", "commit", "commit.tar",
                                      "application/x-tar"),
        f"{prefix}-container": ImageType(f"{prefix}-container", "container", "container.tar",
                                         "application/x-tar"),
        f"{prefix}-installer": ImageType(f"{prefix}-installer", "installer", "installer.iso",
                                         "application/x-iso9660-image"),
    }


_RHEL_DISK_TYPES = ("ami", "azure", "azure-cvm", "azure-rhui", "azure-sap-rhui",
                    "azure-sapapps-rhui", "bootc-rpm-installer", "container",
                    "container-minimal", "ec2", "ec2-cvm", "ec2-ha", "ec2-sap", "gce",
                    "image-installer", "network-installer", "oci", "ova", "pxe-tar-xz",
                    "qcow2", "tar", "vagrant-libvirt", "vagrant-virtualbox", "vhd", "vmdk",
                    "wsl")

DISTROS: dict[str, Distro] = {
    "rhel-9": Distro(
        key="rhel-9", name="rhel-9.6", os_id="rhel", os_version="9.6", major="9",
        ostree_types=_types("edge"),
        other_types=(*_RHEL_DISK_TYPES, "edge-ami", "edge-raw-image",
                     "edge-simplified-installer", "edge-vsphere", "minimal-raw", "openstack"),
        aliases={"rhel-edge-commit": "edge-commit", "rhel-edge-container": "edge-container",
                 "rhel-edge-installer": "edge-installer"}),
    "fedora": Distro(
        key="fedora", name="fedora-42", os_id="fedora", os_version="42", major="42",
        ostree_types=_types("iot"),
        other_types=("bootc-rpm-installer", "everything-network-installer", "generic-ami",
                     "generic-container", "generic-oci", "generic-openstack", "generic-ova",
                     "generic-qcow2", "generic-vhd", "generic-vmdk", "generic-wsl",
                     "iot-bootable-container", "iot-qcow2", "iot-raw-xz",
                     "iot-simplified-installer", "minimal-installer", "minimal-raw-xz",
                     "minimal-raw-zst", "pxe-tar-xz", "server-network-installer",
                     "workstation-live-installer"),
        aliases={"fedora-iot-commit": "iot-commit", "fedora-iot-container": "iot-container",
                 "fedora-iot-installer": "iot-installer"},
        ostree_ref_suffix="iot",
        installer_default_url="mirrorlist=https://ostree.fedoraproject.org/iot/mirrorlist"),
    "rhel-10": Distro(
        key="rhel-10", name="rhel-10.0", os_id="rhel", os_version="10.0", major="10",
        ostree_types={}, other_types=_RHEL_DISK_TYPES, aliases={}),
}
