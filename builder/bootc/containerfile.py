"""For users who build with podman: the release as a Containerfile, and bootc-image-builder's
config.toml, both from the image's blueprint and lock.

The Containerfile follows MicroShift's image-mode pattern (openshift/microshift
packaging/imagemode, docs/config/Containerfile.bootc-embedded-rhel9): FROM a RHEL bootc base,
`dnf install` the packages the lock pins, the release's container images pulled by digest
into /usr/lib/containers/storage and registered as an additional image store (an image store
under /var is lost on upgrade: RHEL-75827), the blueprint's files, services and firewall
applied, `bootc container lint` last. Building it needs the RHEL repositories and a pull
secret, which this machine does not have: the image this project builds itself comes from
the composed commit (builder/bootc/image.py), the same tree without a second depsolve.

bootc-image-builder (bib) reads a subset of the blueprint format: `customizations.user`,
`group`, `kernel`, `filesystem`, `disk`, `installer` (its docs' "Build config" section). The
blueprint's files, services and firewall are image content in image mode: they are in the
Containerfile, and `check_bib_config` refuses any other key.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

from builder.compose.inputs import ComposeInputs
from builder.core.errors import BuildError

BASE = "registry.redhat.io/rhel9/rhel-bootc:9.6"
STORE = "/usr/lib/containers/storage"
BIB_KEYS = {"user", "group", "kernel", "filesystem", "disk", "installer", "fips"}
BIB_TOP = {"customizations"}


def containerfile(inputs: ComposeInputs, base: str = BASE) -> str:
    packages = sorted({package.name for package in inputs.packages
                       if package.name.startswith("microshift")})
    custom = inputs.customizations
    lines = [f"# The {inputs.name} MicroShift image {inputs.version} in image mode: MicroShift's",
             "# pattern (openshift/microshift packaging/imagemode). Rendered by",
             "# microshift-edge-builder from DIR/blueprints; build with",
             "#   podman build --secret id=pullsecret,src=PULL-SECRET -f Containerfile .",
             f"FROM {base}",
             "RUN dnf install -y " + " ".join(packages) + " && dnf clean all",
             "# The release's images, pinned by digest, in an additional image store under /usr.",
             "RUN --mount=type=secret,id=pullsecret,dst=/run/secrets/pull-secret.json \\",
             f"    mkdir -p {STORE} && \\"]
    for container in inputs.containers:
        lines.append(f"    podman pull --authfile /run/secrets/pull-secret.json --root {STORE}"
                     f" {shlex.quote('docker://' + container.source)} && \\")
    lines += [f"    sed -i '/^additionalimagestores/a \"{STORE}\",' "
              "/etc/containers/storage.conf || true",
              *(f"RUN systemctl enable {shlex.quote(s)}" for s in custom.services_enabled),
              *(f"RUN systemctl disable {shlex.quote(s)}" for s in custom.services_disabled),
              *(f"RUN firewall-offline-cmd --zone=public --add-port={p.replace(':', '/')}"
                for p in custom.ports),
              *(f"RUN firewall-offline-cmd --zone={zone.name} --add-source={source}"
                for zone in custom.zones for source in zone.sources)]
    for spec in custom.files:
        payload = json.dumps(spec.data.decode("utf-8", "replace"))
        lines.append(f"RUN mkdir -p {shlex.quote(str(Path(spec.path).parent))} && printf '%s' "
                     f"{shlex.quote(payload)} | python3 -c 'import json,sys; "
                     f"sys.stdout.write(json.load(sys.stdin))' > {shlex.quote(spec.path)} && "
                     f"chmod {spec.mode:o} {shlex.quote(spec.path)}")
    lines.append("RUN bootc container lint")
    return "\n".join(lines) + "\n"


def bib_config(inputs: ComposeInputs, *, user: str | None = None,
               ssh_key: str | None = None, root_size_mib: int = 10240) -> str:
    """bootc-image-builder's config.toml: the admin user, the root file system size."""
    lines = []
    if user is not None:
        lines += ["[[customizations.user]]", f"name = {json.dumps(user)}",
                  'groups = ["wheel"]',
                  *([f"key = {json.dumps(ssh_key)}"] if ssh_key else []), ""]
    lines += ["[[customizations.filesystem]]", 'mountpoint = "/"',
              f'minsize = "{root_size_mib} MiB"', ""]
    text = f"# bootc-image-builder config for {inputs.name} {inputs.version}\n" + \
        "\n".join(lines)
    check_bib_config(text, "config.toml")
    return text


def check_bib_config(text: str, what: str) -> dict[str, Any]:
    """Only the keys bootc-image-builder documents; anything else is refused by name."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{what}: not TOML ({exc})") from None
    extra = sorted(set(data) - BIB_TOP) + sorted(
        f"customizations.{key}" for key in set(data.get("customizations", {})) - BIB_KEYS)
    if extra:
        raise BuildError(f"{what}: {extra[0]} is not a key bootc-image-builder reads; "
                         f"allowed: customizations.{{{', '.join(sorted(BIB_KEYS))}}}")
    return data
