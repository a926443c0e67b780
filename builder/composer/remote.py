"""Drive a remote Image Builder (osbuild-composer): push, depsolve, compose, wait, fetch, import.

This is the "remote backend" of the design: the same rendered blueprint the local backend
uses is sent to the service, and an `edge-commit` result is imported into DIR/ostree/repo
so everything downstream (static deltas, kickstart, ISO) works as after a local compose.
The HTTP details live in builder.composer.client, the ostree import in
builder.composer.importer.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.composer.importer import ImportedCommit, import_commit_tarball
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner

if TYPE_CHECKING:
    # Only for annotations: importing requests costs ~100 ms on every CLI start.
    from builder.composer.client import ComposeStatus, WeldrClient

COMPOSE_TYPES = ("edge-commit", "edge-installer")
# osbuild-composer internal/weldr/api.go ValidBlueprintName
BLUEPRINT_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
# osbuild/images pkg/ostree verifyRef / verifyChecksum
OSTREE_REF_RE = re.compile(r"^(?:[\w\d][-._\w\d]*/)*[\w\d][-._\w\d]*$")
CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")
FINAL_STATES = ("FINISHED", "FAILED")
LOG_TAIL_LINES = 20
CLI = "command line"


@dataclass(frozen=True)
class ComposeOptions:
    """What to build: the Weldr compose request minus the blueprint name."""

    compose_type: str
    ref: str
    parent: str | None = None
    url: str | None = None

    def validate(self) -> None:
        if self.compose_type not in COMPOSE_TYPES:
            raise InputError(CLI, "--type", f"unknown compose type {self.compose_type!r}",
                             hint=f"allowed: {', '.join(COMPOSE_TYPES)}")
        if not OSTREE_REF_RE.match(self.ref) or CHECKSUM_RE.match(self.ref):
            raise InputError(CLI, "--ref", f"{self.ref!r} is not a valid ostree ref",
                             hint="use slash-separated words, e.g. rhel/9/x86_64/edge")
        if self.parent is not None:
            if not (OSTREE_REF_RE.match(self.parent) or CHECKSUM_RE.match(self.parent)):
                raise InputError(CLI, "--parent", f"{self.parent!r} is neither an ostree ref "
                                 "nor a 64-hex commit checksum")
            if not self.url:
                # Same rule as the service ("ostree parent ref specified, but no URL to
                # retrieve it"), checked here so the user learns it before any upload.
                raise InputError(CLI, "--parent", "a parent needs --url, the ostree repo "
                                 "that holds it")
        if self.compose_type == "edge-installer" and not self.url:
            raise InputError(CLI, "--url", "edge-installer needs --url, the ostree repo "
                             "serving the commit to install")
        if self.url is not None and not re.match(r"^(https?|file)://", self.url):
            raise InputError(CLI, "--url", f"{self.url!r} is not a URL",
                             hint="e.g. http://10.0.0.1:8080/repo/")

    def request(self, blueprint: str) -> dict[str, Any]:
        """The POST /compose body (osbuild-composer composeHandler ComposeRequest)."""
        ostree: dict[str, str] = {"ref": self.ref, "parent": self.parent or "",
                                  "url": self.url or ""}
        return {"blueprint_name": blueprint, "compose_type": self.compose_type,
                "branch": "master", "ostree": ostree}


@dataclass(frozen=True)
class WaitOptions:
    poll_interval: float = 5.0
    timeout: float | None = None
    # While the state does not change, repeat it this often so a long compose looks alive.
    report_every: float = 60.0


@dataclass(frozen=True)
class ComposeResult:
    uuid: str
    compose_type: str
    artifact: Path
    size: int
    commit: ImportedCommit | None


@dataclass(frozen=True)
class Blueprint:
    name: str
    text: str
    path: Path


def load_blueprint(build_dir: Path, image: str) -> Blueprint:
    """DIR/blueprints/IMAGE.toml, checked for what the service would refuse first."""
    path = build_dir / "blueprints" / f"{image}.toml"
    if not path.is_file():
        raise InputError(str(path), "", "blueprint not found",
                         hint=f"render it first: python -m builder blueprint --image {image} "
                         f"--build-dir {build_dir}")
    text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"not valid TOML: {exc}") from exc
    name = data.get("name")
    if not isinstance(name, str) or not BLUEPRINT_NAME_RE.match(name):
        raise InputError(str(path), "name", f"{name!r} is not a valid blueprint name",
                         hint="allowed: letters, digits, '.', '_' and '-'")
    return Blueprint(name=name, text=text, path=path)


def describe_package(pkg: dict[str, Any]) -> str:
    epoch = pkg.get("epoch") or 0
    evr = f"{epoch}:" if epoch else ""
    return f"{pkg.get('name')}-{evr}{pkg.get('version')}-{pkg.get('release')}.{pkg.get('arch')}"


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def wait_for_compose(client: WeldrClient, uuid: str, progress: Progress,
                     options: WaitOptions) -> ComposeStatus:
    """Poll until FINISHED (returned) or FAILED (raised, with the log tail)."""
    started = client.clock()
    last_state, last_report = "", started
    while True:
        status = client.status(uuid)
        now = client.clock()
        state = status.queue_status
        if state != last_state or now - last_report >= options.report_every:
            progress.info(f"compose {uuid}: {state} ({_elapsed(now - started)} elapsed)",
                          uuid=uuid, state=state, elapsed=round(now - started, 1))
            last_state, last_report = state, now
        if state == "FINISHED":
            return status
        if state == "FAILED":
            raise compose_failed(client, status)
        if options.timeout is not None and now - started >= options.timeout:
            raise BuildError(f"composer: compose {uuid} is still {state} after "
                             f"{_elapsed(now - started)}",
                             hint=f"it keeps running on the service; follow it with "
                             f"`python -m builder composer status {uuid} --wait` or raise "
                             "--wait-timeout")
        client.sleep(options.poll_interval)


def compose_failed(client: WeldrClient, status: ComposeStatus) -> BuildError:
    """A FAILED compose as one error naming the uuid, with the last lines of its log."""
    try:
        lines = [ln for ln in client.log(status.uuid).splitlines() if ln.strip()]
        tail = "\n".join("    " + ln for ln in lines[-LOG_TAIL_LINES:]) or "    (log is empty)"
    except BuildError as exc:
        tail = f"    (log unavailable: {exc.message})"
    return BuildError(f"composer: compose {status.uuid} FAILED ({status.compose_type} of "
                      f"blueprint {status.blueprint}); last log lines:\n{tail}",
                      hint=f"full log: GET /api/v1/compose/log/{status.uuid} "
                      f"(composer-cli compose log {status.uuid})")


def artifact_path(build_dir: Path, image: str, compose_type: str, uuid: str) -> Path:
    if compose_type == "edge-installer":
        return build_dir / "installer" / f"{image}.iso"
    return build_dir / "composer" / f"{image}-{uuid}-commit.tar"


def fetch_result(client: WeldrClient, status: ComposeStatus, *, build_dir: Path, image: str,
                 progress: Progress, runner: Runner,
                 expected_ref: str | None = None) -> ComposeResult:
    """Download a FINISHED compose's artifact; import it when it is an edge-commit."""
    if status.queue_status != "FINISHED":
        raise BuildError(f"composer: compose {status.uuid} is {status.queue_status}, "
                         "not FINISHED; nothing to fetch")
    dest = artifact_path(build_dir, image, status.compose_type, status.uuid)
    with progress.step(f"download {status.compose_type} {status.uuid}"):
        size = client.download_image(status.uuid, dest, progress)
    commit = None
    if status.compose_type == "edge-commit":
        with progress.step(f"import into {build_dir / 'ostree' / 'repo'}"):
            commit = import_commit_tarball(dest, build_dir / "ostree" / "repo", runner,
                                           progress, expected_ref=expected_ref)
            progress.info(f"{commit.ref} -> {commit.commit}", ref=commit.ref,
                          commit=commit.commit)
    return ComposeResult(uuid=status.uuid, compose_type=status.compose_type, artifact=dest,
                         size=size, commit=commit)


def run_compose(client: WeldrClient, *, build_dir: Path, image: str, options: ComposeOptions,
                wait: WaitOptions, progress: Progress, runner: Runner) -> ComposeResult:
    """Push + depsolve + start + wait + download (+ import) in one go."""
    options.validate()
    blueprint = load_blueprint(build_dir, image)
    with progress.step(f"push blueprint {blueprint.name} to {client.endpoint.describe()}"):
        client.push_blueprint(blueprint.text)
    with progress.step(f"depsolve {blueprint.name}"):
        packages = client.depsolve(blueprint.name)
        progress.info(f"{len(packages)} packages resolve", packages=len(packages))
    with progress.step(f"compose {options.compose_type} ({options.ref})"):
        uuid = client.start_compose(options.request(blueprint.name))
        progress.info(f"compose started: {uuid}", uuid=uuid)
        status = wait_for_compose(client, uuid, progress, wait)
    return fetch_result(client, status, build_dir=build_dir, image=image, progress=progress,
                        runner=runner, expected_ref=options.ref)
