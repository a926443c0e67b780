"""Kickstart files for MicroShift edge devices: render from kickstart/*.ks.j2, validate with
pykickstart's RHEL 9 syntax, write atomically.

Two variants: `network` installs the image's ostree commit from an HTTP(S) repository;
`embedded` installs it from the repository on the installer ISO (builder/installer/iso.py puts it at
ISO_REPO_DIR, which Anaconda mounts under /run/install/repo). Both share the post-install set-up
of _common.ks.j2: the ostree remote for upgrades, MicroShift and greenboot configuration, the
firewall's trusted sources, and the CRI-O pull secret, which is read from its file only while
rendering and lands in a %post section that has no --log and prints nothing.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError, InputError
from builder.core.files import write_atomic
from builder.core.paths import PROJECT_ROOT
from builder.core.templates import environment, relative, render_with

KICKSTART_DIR = PROJECT_ROOT / "kickstart"
VARIANTS = {"network": "network.ks.j2", "embedded": "embedded.ks.j2",
            "container": "container.ks.j2"}
ISO_REPO_DIR = "ostree/repo"  # where the ostree repository sits on the installer ISO
EMBEDDED_REPO_URL = f"file:///run/install/repo/{ISO_REPO_DIR}"
# A data ISO attached beside a stock boot ISO is mounted here by the kickstart's %pre.
DATA_MEDIA_MOUNT = "/run/install/microshift"
DATA_MEDIA_URL = f"file://{DATA_MEDIA_MOUNT}/{ISO_REPO_DIR}"
DEFAULT_TRUSTED_SOURCES = ("10.42.0.0/16", "fd01::/48", "169.254.169.1")
# The blueprint's firewall ports ("port:protocol"), opened again by the kickstart.
DEFAULT_FIREWALL_PORTS = ("6443:tcp", "80:tcp", "443:tcp", "5353:udp", "30000-32767:tcp",
                          "30000-32767:udp")
PORT_RE = re.compile(r"^[0-9]{1,5}(-[0-9]{1,5})?:(tcp|udp)$")
SECRET_PATH = "/etc/crio/openshift-pull-secret"

NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
# ostree refs: slash-separated components of letters, digits, '.', '_', '-'.
REF_RE = re.compile(r"^[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$")
URL_RE = re.compile(r"^(?:https?|file)://[^\s\"'\\`$]+$")
# Lines in a section body that the kickstart parser would take for a section header.
SECTION_LINE_RE = re.compile(r"^\s*%")


@dataclass(frozen=True)
class KickstartContext:
    """Everything a kickstart template sees (as `ks`). Paths are read only while rendering."""

    image: str
    install_url: str             # where Anaconda pulls the commit from
    ref: str
    update_url: str | None       # ostree remote for later upgrades; None: no remote is kept
    osname: str = "rhel"
    remote: str = "edge"
    gpg_verify: bool = False     # the commit is signed: verify it, at install and upgrade
    gpg_key: Path | None = None  # ASCII-armored public key, needed when gpg_verify
    microshift_config: str | None = None  # /etc/microshift/config.yaml content
    greenboot_max_boot_attempts: int = 3
    pull_secret: Path | None = None
    storage: bool = False        # TopoLVM in the image: leave free space in the volume group
    volume_group: str = "rhel"
    root_size_mib: int = 10240
    trusted_sources: tuple[str, ...] = DEFAULT_TRUSTED_SOURCES
    firewall_ports: tuple[str, ...] = DEFAULT_FIREWALL_PORTS
    timezone: str = "UTC"
    admin_user: str = "redhat"
    ssh_key: str | None = None   # public key line for admin_user; None: no user account
    media_label: str | None = None  # volume id of a data ISO to mount (install_url: DATA_...)
    container: str | None = None    # image mode: REGISTRY/NS/NAME@sha256:... to install
    lookaside: str | None = None    # where the image's signatures are published (a URL)

    def __post_init__(self) -> None:
        _check_context(self)

    @property
    def media_mount(self) -> str:
        return DATA_MEDIA_MOUNT

    @property
    def container_namespace(self) -> str:
        """The policy's scope: the release's registry namespace (REGISTRY/NS)."""
        repository = (self.container or "").split("@")[0]
        namespace, _, name = repository.rpartition("/")
        return namespace if name else repository


def _bad(field: str, problem: str, hint: str | None = None) -> InputError:
    return InputError("kickstart", field, problem, hint)


def _check_context(ks: KickstartContext) -> None:
    for field, value in (("image", ks.image), ("osname", ks.osname), ("remote", ks.remote),
                         ("volume_group", ks.volume_group), ("admin_user", ks.admin_user)):
        if not NAME_RE.match(value):
            raise _bad(field, f"{value!r} is not a valid name",
                       "use letters, digits, '.', '_' and '-'")
    if not REF_RE.match(ks.ref):
        raise _bad("ref", f"{ks.ref!r} is not an ostree ref", "e.g. rhel/9/x86_64/edge")
    for field, url in (("install_url", ks.install_url), ("update_url", ks.update_url)):
        if url is not None and not URL_RE.match(url):
            raise _bad(field, f"{url!r} is not a usable URL",
                       "use http://, https:// or file:// with no spaces or quotes")
    if not 1 <= ks.greenboot_max_boot_attempts <= 100:
        raise _bad("greenboot_max_boot_attempts",
                   f"{ks.greenboot_max_boot_attempts} is out of range", "use 1 to 100")
    if ks.root_size_mib < 2048:
        raise _bad("root_size_mib", f"{ks.root_size_mib} MiB is too small", "use 2048 or more")
    for source in ks.trusted_sources:
        try:
            ipaddress.ip_network(source, strict=False)
        except ValueError as exc:
            raise _bad("trusted_sources", f"{source!r} is not an address or network") from exc
    for port in ks.firewall_ports:
        if not PORT_RE.match(port):
            raise _bad("firewall_ports", f"{port!r} is not PORT[-PORT]:tcp|udp")
    _check_options(ks)


CONTAINER_RE = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]+|@sha256:"
                          r"[0-9a-f]{64})$")


def _check_container(ks: KickstartContext) -> None:
    if not CONTAINER_RE.match(ks.container or ""):
        raise _bad("container", f"{ks.container!r} is not an image reference",
                   "REGISTRY/NAMESPACE/NAME@sha256:DIGEST (or :TAG)")
    if ks.gpg_verify and (ks.lookaside is None or not URL_RE.match(ks.lookaside)):
        raise _bad("lookaside", f"{ks.lookaside!r} is not a URL",
                   "where the signatures are published, e.g. https://updates.example.com/"
                   "sigstore")


def _check_options(ks: KickstartContext) -> None:
    if ks.media_label is not None and (not re.match(r"^[A-Z0-9_-]{1,32}$", ks.media_label)
                                       or ks.install_url != DATA_MEDIA_URL):
        raise _bad("media_label", f"{ks.media_label!r} needs install_url {DATA_MEDIA_URL} and "
                                  "a volume id of 1-32 characters A-Z, 0-9, '_', '-'")
    if ks.container is not None:
        _check_container(ks)
    if ks.gpg_verify and ks.gpg_key is None:
        raise _bad("gpg_key", "the commit is signed but no public key was given",
                   "export it with `gpg --export --armor KEYID > key.asc` and pass it")
    if ks.ssh_key is not None and (not ks.ssh_key.strip()
                                   or re.search(r"[\"\\\x00-\x1f\x7f]", ks.ssh_key)):
        raise _bad("ssh_key", "must be one public key line without quotes, backslashes or "
                              "control characters")
    if not re.match(r"^[A-Za-z0-9_+/-]+$", ks.timezone):
        raise _bad("timezone", f"{ks.timezone!r} is not a time zone name", "e.g. UTC")
    if ks.microshift_config is not None:
        _check_heredoc_text("microshift_config", ks.microshift_config, "MICROSHIFT_CONFIG_EOF")


def _check_heredoc_text(field: str, text: str, delimiter: str) -> None:
    """Text pasted into a %post here-document must not end it or open a kickstart section."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == delimiter:
            raise _bad(field, f"line {number} is the here-document delimiter {delimiter}")
        if SECTION_LINE_RE.match(line):
            raise _bad(field, f"line {number} starts with '%', which kickstart reads as a "
                              "section header", "indent it or quote it")


@dataclass(frozen=True)
class ImageFacts:
    """What a kickstart needs to know about an image, read from its rendered blueprint."""

    storage: bool
    microshift_config: str | None
    max_boot_attempts: int
    trusted_sources: tuple[str, ...]
    firewall_ports: tuple[str, ...] = DEFAULT_FIREWALL_PORTS


def load_image_facts(blueprint: Path, image: str) -> ImageFacts:
    """Facts from DIR/blueprints/NAME.toml, the single description of an image."""
    if not blueprint.is_file():
        raise InputError(str(blueprint), "", f"no rendered blueprint for image {image!r}",
                         hint=f"run `python -m builder blueprint --image {image}` with the "
                              "same --build-dir first")
    try:
        data = tomllib.loads(blueprint.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(blueprint), "", f"not valid TOML: {exc}") from exc
    packages = {p.get("name") for p in data.get("packages", []) if isinstance(p, dict)}
    custom = data.get("customizations", {})
    files = {f.get("path"): f.get("data") for f in custom.get("files", [])
             if isinstance(f, dict)}
    attempts = 3
    greenboot = files.get("/etc/greenboot/greenboot.conf")
    if isinstance(greenboot, str):
        match = re.search(r"^GREENBOOT_MAX_BOOT_ATTEMPTS=(\d+)\s*$", greenboot, re.MULTILINE)
        attempts = int(match.group(1)) if match else attempts
    ports = custom.get("firewall", {}).get("ports")
    zones = custom.get("firewall", {}).get("zones", [])
    trusted = [z.get("sources", []) for z in zones
               if isinstance(z, dict) and z.get("name") == "trusted"]
    config = files.get("/etc/microshift/config.yaml")
    return ImageFacts(
        storage="microshift-storage-topolvm" in packages,
        microshift_config=config if isinstance(config, str) else None,
        max_boot_attempts=attempts,
        trusted_sources=tuple(trusted[0]) if trusted else DEFAULT_TRUSTED_SOURCES,
        firewall_ports=tuple(ports) if isinstance(ports, list) else DEFAULT_FIREWALL_PORTS,
    )


def read_pull_secret(path: Path) -> str:
    """The pull secret as one line of JSON. Never echoed: errors name the file, not the text."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "", f"pull secret is not UTF-8 text (byte {exc.start})",
                         "download it from console.redhat.com/openshift/install/pull-secret") \
            from None
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read the pull secret: {exc.strerror}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), "", f"pull secret is not JSON (line {exc.lineno})",
                         "download it from console.redhat.com/openshift/install/pull-secret") \
            from None
    if not isinstance(data, dict) or not isinstance(data.get("auths"), dict):
        raise InputError(str(path), "auths", "a pull secret is a JSON object with an "
                                             "'auths' mapping of registry credentials")
    # One line: nothing in it can close the here-document or look like a kickstart section.
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def read_gpg_key(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read the public key: {exc}",
                         "export it with `gpg --export --armor KEYID`") from exc
    if not (text.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
            and text.endswith("-----END PGP PUBLIC KEY BLOCK-----")):
        raise InputError(str(path), "", "not an ASCII-armored OpenPGP public key",
                         "export it with `gpg --export --armor KEYID`")
    return text


def render(template: str, ks: KickstartContext, *, search_path: Path = KICKSTART_DIR) -> str:
    """Render one kickstart template (a VARIANTS key or a file name) and validate the result."""
    name = VARIANTS.get(template, template)
    secret = read_pull_secret(ks.pull_secret) if ks.pull_secret else None
    gpg_key = read_gpg_key(ks.gpg_key) if ks.gpg_verify and ks.gpg_key else None
    env = environment(search_path)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    text = render_with(env, search_path, name, {"ks": ks, "secret": secret, "gpg_key": gpg_key})
    # Macros leave runs of blank lines; keep the output tidy.
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    validate(text, source=relative(search_path / name), secret=secret)
    return text


def validate(text: str, *, source: str = "kickstart", secret: str | None = None) -> None:
    """Parse with pykickstart's RHEL 9 handler; any error or warning is a BuildError.

    `source` names the template in messages. With `secret`, also check that the %post section
    holding it writes no log file.
    """
    from pykickstart.errors import KickstartError, KickstartParseWarning
    from pykickstart.parser import KickstartParser
    from pykickstart.version import RHEL9, makeVersion

    handler = makeVersion(RHEL9)
    parser = KickstartParser(handler, followIncludes=False, errorsAreFatal=True)
    with warnings.catch_warnings():
        # As ksvalidator does: a deprecated or ignored option is a mistake in our template.
        warnings.simplefilter("error", KickstartParseWarning)
        try:
            parser.readKickstartFromString(text)
        except (KickstartError, KickstartParseWarning, ValueError) as exc:
            # ValueError: pykickstart's shlex on an unbalanced quote.
            raise _validation_error(text, source, exc) from None
    container = getattr(handler, "ostreecontainer", None)
    if (handler.ostreesetup.url is None or not handler.ostreesetup.ref) and \
            (container is None or not container.url):
        raise BuildError(f"{source}: rendered kickstart has no ostreesetup or ostreecontainer "
                         "command")
    if secret is not None:
        _check_secret_not_logged(handler.scripts, source, secret)


def _validation_error(text: str, source: str, exc: BaseException) -> BuildError:
    lineno = getattr(exc, "lineno", None)
    message = getattr(exc, "message", None) or str(exc)
    message = " ".join(str(message).split())
    if lineno:
        lines = text.splitlines()
        shown = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        return BuildError(f"{source}: rendered kickstart line {lineno}: {message}: {shown!r}",
                          hint="fix the template; pykickstart's RHEL 9 syntax is the reference")
    return BuildError(f"{source}: rendered kickstart is invalid: {message}")


def _check_secret_not_logged(scripts: list[Any], source: str, secret: str) -> None:
    holders = [s for s in scripts if secret in s.script]
    if not holders:
        raise BuildError(f"{source}: the pull secret is missing from the rendered kickstart")
    for script in holders:
        if script.logfile or re.search(r"^\s*set\s+-[a-z]*x", script.script, re.MULTILINE):
            raise BuildError(f"{source}: line {script.lineno}: the section holding the pull "
                             "secret logs or traces its commands; it must not")


def write_kickstart(path: Path, text: str, *, private: bool) -> int:
    """Write atomically; a kickstart that holds a secret is readable by its owner only."""
    return write_atomic(path, text, 0o600 if private else 0o644)
