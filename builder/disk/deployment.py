"""The disk's ostree sysroot, deployed into a directory the file systems are made from.

As Anaconda's ostreesetup and Image Builder's edge-raw-image do it: an empty sysroot
(`ostree admin init-fs`, `os-init`), the image's remote (gpg-verify=true with the release
key in /etc/pki/ostree/REMOTE.gpg, as the kickstarts set it up), the commit pulled and
deployed from REMOTE:REF so that updates follow that ref, /etc/fstab mounting the boot
partition, and GRUB's environment block for greenboot's boot counter. The GRUB menu is
written by the commit's own generator (OSTREE_GRUB2_EXEC), the one its ostree runs when it
finalizes a staged update, so the menu the disk starts with is the one updates write.

An image-mode disk (`image` set) is installed from the release's bootc image instead, as
`bootc install` and the kickstart's `ostreecontainer` do: the image's layers imported into
the sysroot's repository by the device's own bootc (ostree-rs-ext's import: one commit per
layer, then the merged commit carrying the manifest digest) and deployed with an origin
naming the image, so that `bootc status` shows it booted and `bootc upgrade` follows it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.runner import Runner, find_tool

# The SAMPLE bootable base's GRUB menu generator (baseos/overlay): Debian's GRUB has no
# blscfg, so the menu is written from ostree's boot loader entries.
GENERATOR = "/usr/libexec/sample-base/grub2-mkconfig"
# The kernel's console per architecture: the PC's 16550 UART (QEMU's pc board, most x86_64
# devices), the PL011 UART of arm64's virt board and of most Arm SoCs.
SERIAL_CONSOLE = {"x86_64": "ttyS0", "aarch64": "ttyAMA0"}


def console_karg(arch: str) -> str:
    return f"console={SERIAL_CONSOLE.get(arch, 'ttyS0')},115200"


# How ostree-rs-ext names an image whose signature the containers policy checks.
SIGNED_ORIGIN = "container-image-reference=ostree-image-signed:docker://{reference}"


@dataclass(frozen=True)
class ImageSource:
    """The bootc image a disk is installed from, and the bootc that imports it."""

    layout: Path        # an OCI layout holding only this image
    reference: str      # REGISTRY/NAMESPACE/NAME[:TAG] the device's origin and policy name
    manifest: str       # sha256:... of the image in the layout
    bootc: Path         # the bootc program that imports it (the SAMPLE stand-in here)


@dataclass(frozen=True)
class Deployment:
    """What goes on the disk: a commit of a ref, where updates come from, extra files."""

    source: Path                   # the published repository holding the commit
    ref: str
    commit: str
    remote: str = "edge"
    remote_url: str = ""
    gpg_key: Path | None = None    # the public key the remote verifies commits with
    osname: str = "edge"
    kargs: tuple[str, ...] = ("console=ttyS0,115200",)
    # Files an admin or the factory puts in the deployment's /etc and in /var (path -> bytes).
    etc_files: Mapping[str, bytes] = field(default_factory=dict)
    var_files: Mapping[str, bytes] = field(default_factory=dict)
    etc_links: Mapping[str, str] = field(default_factory=dict)  # path in /etc -> target
    image: ImageSource | None = None   # install from this bootc image, not from `commit`


def deploy_sysroot(runner: Runner, stage: Path, deployment: Deployment, *, boot_uuid: str,
                   root_uuid: str, work: Path) -> Path:
    """Deploy into the empty directory `stage`; returns the deployment's directory."""
    d = deployment
    admin = ["ostree", "admin", f"--sysroot={stage}"]
    runner.run([*admin, "init-fs", str(stage)])
    runner.run([*admin, "os-init", d.osname])
    repo = Repo(stage / "ostree/repo", runner)
    runner.run(["ostree", f"--repo={repo.path}", "config", "set", "sysroot.bootloader", "grub2"])
    _add_remote(runner, repo, d)
    _boot_dir(runner, stage)
    kargs = [f"--karg=root=UUID={root_uuid}", "--karg=rw", *(f"--karg={k}" for k in d.kargs)]
    if d.image is None:
        generator = _generator(Repo(d.source, runner), d.commit, f"commit {d.commit[:12]} of "
                               f"{d.ref}", work)
        runner.run(["ostree", f"--repo={repo.path}", "pull-local", f"--remote={d.remote}",
                    str(d.source), d.commit])
        repo.set_ref(f"{d.remote}:{d.ref}", d.commit)
        checksum, source = d.commit, [f"{d.remote}:{d.ref}"]
    else:
        checksum = import_image(runner, stage, d.image, work)
        # The image's own generator: an image made elsewhere has no commit here.
        generator = _generator(repo, checksum, f"image {d.image.manifest[:19]}", work)
        origin = work / "image.origin"
        origin.write_text("[origin]\n" + SIGNED_ORIGIN.format(reference=d.image.reference)
                          + "\n")
        source = [f"--origin-file={origin}", checksum]
    runner.run([*admin, "deploy", f"--os={d.osname}", *kargs, *source],
               env={"OSTREE_GRUB2_EXEC": str(generator)})
    deployed = stage / "ostree/deploy" / d.osname / "deploy" / f"{checksum}.0"
    if not deployed.is_dir():
        raise BuildError(f"ostree admin deploy left no deployment {deployed.name}")
    # ostree marks a deployment's root immutable against `rm -rf`; the file systems are made
    # from this directory (mke2fs -d copies no inode flags) and it must be removable.
    runner.run(["chattr", "-i", str(deployed)])
    etc = {"fstab": f"UUID={boot_uuid} /boot ext4 defaults 0 2\n".encode(), **d.etc_files}
    if d.gpg_key is not None:
        etc[f"pki/ostree/{d.remote}.gpg"] = d.gpg_key.read_bytes()
    _write_files(deployed / "etc", etc)
    for name, target in d.etc_links.items():
        link = deployed / "etc" / name.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        os.symlink(target, link)
    _write_files(stage / "ostree/deploy" / d.osname / "var", d.var_files)
    return deployed


def import_image(runner: Runner, stage: Path, image: ImageSource, work: Path) -> str:
    """The image as a commit of the sysroot's repository, imported by `bootc internals
    import` (the stand-in reads the sysroot under MICROSHIFT_ROOT/sysroot); its checksum."""
    root = work / "bootc-root"
    root.mkdir()
    (root / "sysroot").symlink_to(stage)
    out = runner.output(["python3", str(image.bootc), "internals", "import",
                         f"oci:{image.layout}"], env={"MICROSHIFT_ROOT": str(root)})
    checksum, _, digest = out.strip().partition(" ")
    if digest != image.manifest:
        raise BuildError(f"bootc imported {digest or 'nothing'} from {image.layout}, not "
                         f"the image {image.manifest}")
    return checksum


def _add_remote(runner: Runner, repo: Repo, d: Deployment) -> None:
    verify = (["--set=gpg-verify=true", "--set=gpg-verify-summary=true",
               f"--set=gpgkeypath=/etc/pki/ostree/{d.remote}.gpg"]
              if d.gpg_key is not None else ["--no-gpg-verify"])
    runner.run(["ostree", f"--repo={repo.path}", "remote", "add", *verify, d.remote,
                d.remote_url or "file:///dev/null", d.ref])


def _boot_dir(runner: Runner, stage: Path) -> None:
    """/boot/grub2 holds grubenv and a grub.cfg that is ostree's current loader's; Debian's
    tools look in /boot/grub, the same directory."""
    grub2 = stage / "boot/grub2"
    grub2.mkdir(parents=True)
    os.symlink("grub2", stage / "boot/grub")
    os.symlink("../loader/grub.cfg", grub2 / "grub.cfg")
    editenv = find_tool("grub-editenv") or find_tool("grub2-editenv") or "grub-editenv"
    runner.run([editenv, str(grub2 / "grubenv"), "create"])


def _generator(repo: Repo, checksum: str, what: str, work: Path) -> Path:
    data = repo.cat(checksum, GENERATOR)
    if data is None:
        raise BuildError(f"{what} has no {GENERATOR}: disk images are made of commits and "
                         "images on the SAMPLE bootable base (their GRUB menu is written by "
                         "it)",
                         hint="compose the image onto `python -m builder bootable-base`'s "
                              "commit (release.yaml ostree.base), or make a RHEL for Edge "
                              "raw image with Image Builder (edge-raw-image)")
    path = work / "grub2-mkconfig"
    path.write_bytes(data)
    path.chmod(0o755)
    return path


def _write_files(root: Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name.lstrip("/")
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def move_boot(stage: Path, dest: Path) -> None:
    """/boot's content becomes the boot partition's; the root keeps an empty mount point."""
    shutil.move(str(stage / "boot"), dest)
    (stage / "boot").mkdir(mode=0o755)
