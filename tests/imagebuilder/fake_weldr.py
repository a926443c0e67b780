"""An in-repo fake of osbuild-composer's Weldr API, for contract tests of builder.imagebuilder.

osbuild-composer cannot run here. This fake answers every route the client uses with the
checks, status codes, error ids and reply shapes of osbuild/osbuild-composer
internal/weldr/api.go (setupRouter, statusResponseError, notFoundHandler, and the handlers
named on each method below) and internal/store/store.go (PushBlueprint's version bump,
DeleteBlueprint). Blueprint decoding lives in fake_blueprint.py, what each host distro offers
in fake_distro.py, what the workers do (containers, ostree refs, the commit) in
fake_build.py; each cites its upstream files. Where upstream is unclear the fake is lenient.

The distro is a parameter: FakeWeldr(workdir, distro="rhel-9" | "fedora" | "rhel-10").
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.imagebuilder import fake_blueprint as bps
from tests.imagebuilder.fake_build import (
    BuildRequest,
    ResolveError,
    build_commit_tarball,
    parent_fetch_problem,
    resolve_containers,
    resolve_ref,
)
from tests.imagebuilder.fake_distro import DISTROS, Distro, ImageType
from tests.imagebuilder.fake_http import (
    FakeServer,
    Reply,
    Request,
    error,
    not_found,
    ok,
    parse_uuid,
)
from tests.imagebuilder.fake_ostree_options import check_ostree_options

# api.go ValidBlueprintName
VALID_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
ARCHES = ("x86_64", "aarch64")
FAILED_LOG = "\n".join([
    "Pipeline build: 1d7bcd0b9a0b",
    "Stage org.osbuild.rpm",
    "Installing packages...",
    "error: Failed dependencies:",
    "        microshift-networking-provider conflicts with microshift-networking-bridge",
    "Error: stage org.osbuild.rpm failed (exit code 1)",
]) + "\n"


@dataclass
class Scenario:
    """How the fake behaves; each test sets what it needs."""

    # Queue states a compose goes through, one per status poll; the last one sticks.
    states: tuple[str, ...] = ("WAITING", "RUNNING", "FINISHED")
    # Depsolve failure text: /blueprints/depsolve answers BlueprintsError, /compose DepsolveError.
    depsolve_error: str | None = None
    # "METHOD /path-prefix" -> HTTP codes to answer first, in order; 0 drops the connection.
    faults: dict[str, list[int]] = field(default_factory=dict)
    # Seconds to stall before answering status requests (timeouts).
    status_delay: float = 0.0
    log: str = FAILED_LOG
    # Container sources the workers can pull (source -> digest); anything else fails.
    registry: dict[str, str] = field(default_factory=dict)


@dataclass
class Compose:
    id: str
    blueprint: dict[str, Any]
    image_type: ImageType
    ref: str
    url: str
    parent: str | None = None          # resolved parent commit (commit types)
    payload: str | None = None         # resolved commit to embed (installer types)
    containers: tuple[dict[str, str], ...] = ()
    polls: int = 0
    created: float = field(default_factory=time.time)
    artifact: bytes | None = None
    commit: str | None = None
    failure: str | None = None


@dataclass(frozen=True)
class ComposeTarget:
    blueprint: dict[str, Any]
    image_type: ImageType
    ostree: dict[str, Any] | None


class FakeWeldr(FakeServer):
    """Serve the fake on a unix socket and/or TCP; `stop()` (or a with-block) shuts it down."""

    def __init__(self, workdir: Path, scenario: Scenario | None = None,
                 distro: str = "rhel-9") -> None:
        super().__init__()
        self.workdir = workdir
        self.scenario = scenario or Scenario()
        self.distro: Distro = DISTROS[distro]
        self.blueprints: dict[str, dict[str, Any]] = {}
        self.pushes: dict[str, int] = {}
        self.composes: dict[str, Compose] = {}
        self.faults = self.scenario.faults
        self.routes = {
            ("GET", "compose/types"): self.compose_types,
            ("POST", "blueprints/new"): self.blueprints_new,
            ("GET", "blueprints/info/*"): self.blueprints_info,
            ("GET", "blueprints/depsolve/*"): self.blueprints_depsolve,
            ("DELETE", "blueprints/delete/:"): self.blueprints_delete,
            ("POST", "compose"): self.compose,
            ("GET", "compose/status/:"): self.compose_status,
            ("GET", "compose/image/:"): self.compose_image,
            ("GET", "compose/log/:"): self.compose_log,
        }

    def __enter__(self) -> FakeWeldr:
        return self

    def compose_requests(self) -> list[dict[str, Any]]:
        return [json.loads(r.body) for r in self.requests
                if r.method == "POST" and r.path.endswith("/compose")]

    # -- blueprints -------------------------------------------------------------------------

    def blueprints_new(self, req: Request) -> Reply:
        """api.go blueprintsNewHandler + store.go PushBlueprint."""
        bp = self._pushed_blueprint(req)
        if not isinstance(bp, dict):
            return bp
        try:
            bps.initialize(bp)
        except bps.DecodeError as exc:
            return error(400, "BlueprintsError", str(exc))
        name = bp["name"]
        with self.lock:
            old = self.blueprints.get(name)
            if old is not None and bp["version"] == old["version"]:
                # store.go PushBlueprint: the same version again is bumped (BumpPatch).
                bp["version"] = bps.bump_version(old["version"]) or bp["version"]
            self.blueprints[name] = bp
            self.pushes[name] = self.pushes.get(name, 0) + 1
        return ok({"status": True})

    def _pushed_blueprint(self, req: Request) -> dict[str, Any] | Reply:
        if req.content_type is None:
            return error(400, "BlueprintsError", "missing Content-Type header")
        if not req.body:
            return error(400, "BlueprintsError", "Missing blueprint")
        try:
            bp = bps.decode(req.content_type, req.body)
        except bps.DecodeError as exc:
            return error(400, "BlueprintsError", "400 Bad Request: The browser (or proxy) sent "
                         f"a request that this server could not understand: {exc}")
        name = bp.get("name", "")
        if not name or not VALID_NAME.match(name):
            return error(400, "InvalidChars", "Invalid characters in API path")
        if bp.get("distro") and not self._known_distro(bp["distro"]):
            arch = bp.get("architecture") or "x86_64"
            return error(400, "BlueprintsError", f"'{bp['distro']}' is not a valid "
                         f"distribution (architecture '{arch}')")
        return bp

    def blueprints_info(self, req: Request) -> Reply:
        """api.go blueprintsInfoHandler (JSON format)."""
        names = self._names(req.param)
        if isinstance(names, tuple):
            return names
        found, changes, errors = [], [], []
        for name in names:
            bp = self.blueprints.get(name)
            if bp is None:
                errors.append({"id": "UnknownBlueprint", "msg": f"{name}: "})
                continue
            found.append(bp)
            changes.append({"changed": False, "name": name})
        return ok({"blueprints": found, "changes": changes, "errors": errors})

    def blueprints_depsolve(self, req: Request) -> Reply:
        """api.go blueprintsDepsolveHandler: 200 with per-blueprint errors."""
        names = self._names(req.param)
        if isinstance(names, tuple):
            return names
        entries: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for name in names:
            bp = self.blueprints.get(name)
            if bp is None:
                errors.append({"id": "UnknownBlueprint", "msg": f"{name}: blueprint not found"})
                continue
            deps = _dependencies(bp)
            if self.scenario.depsolve_error:
                errors.append({"id": "BlueprintsError",
                               "msg": f"{name}: {self.scenario.depsolve_error}"})
                deps = []
            entries.append({"blueprint": bp, "dependencies": deps})
        return ok({"blueprints": entries, "errors": errors})

    def blueprints_delete(self, req: Request) -> Reply:
        """api.go blueprintDeleteHandler + store.go DeleteBlueprint."""
        name = req.param
        if not VALID_NAME.match(name):
            return error(400, "InvalidChars", "Invalid characters in API path")
        with self.lock:
            if self.blueprints.pop(name, None) is None:
                return error(400, "BlueprintsError", f"Unknown blueprint: {name}")
        return ok({"status": True})

    def _names(self, param: str) -> list[str] | Reply:
        names = param.split(",")
        if names[0] == "/":
            return not_found()
        names[0] = names[0][1:]
        if any(not n or not VALID_NAME.match(n) for n in names):
            return error(400, "InvalidChars", "Invalid characters in API path")
        return names

    def _known_distro(self, name: str) -> bool:
        d = self.distro
        return name in (d.name, d.key) or name.startswith(f"{d.os_id}-{d.major}")

    # -- composes ---------------------------------------------------------------------------

    def compose_types(self, req: Request) -> Reply:
        """api.go composeTypesHandler: {"types": [{"name", "enabled"}]}, sorted."""
        wanted = (req.query.get("distro") or [""])[0]
        if wanted and not self._known_distro(wanted):
            return error(400, "DistroError", f"Invalid distro: {wanted}")
        arch = (req.query.get("arch") or ["x86_64"])[0]
        if arch not in ARCHES:
            return error(400, "DistroError", f"Unknown arch: {arch}")
        return ok({"types": [{"name": n, "enabled": True}
                             for n in self.distro.list_image_types()]})

    def compose(self, req: Request) -> Reply:
        """api.go composeHandler, its checks in upstream order."""
        target = self._compose_target(req)
        if not isinstance(target, ComposeTarget):
            return target
        bp, image_type, ostree = target.blueprint, target.image_type, target.ostree
        warnings, problem = check_ostree_options(self.distro, image_type, bp, ostree)
        if problem is not None:
            return error(400, "ManifestCreationFailed",
                         f"failed to initialize osbuild manifest: {problem}")
        if self.scenario.depsolve_error:
            return error(500, "DepsolveError", self.scenario.depsolve_error)
        return self._resolve_and_queue(bp, image_type, ostree or {}, warnings)

    def _compose_target(self, req: Request) -> ComposeTarget | Reply:
        """composeHandler up to the image type: the blueprint, the type, the ostree options."""
        if req.content_type != "application/json":
            return error(400, "MissingPost", "blueprint must be json")
        cr = _compose_request(req.body)
        if cr is None:
            return not_found()
        bp = self._committed(cr.get("blueprint_name", ""))
        if not isinstance(bp, dict):
            return bp
        arch = bp.get("architecture") or "x86_64"
        if (bp.get("distro") and not self._known_distro(bp["distro"])) or arch not in ARCHES:
            return error(400, "DistroError", f"Unknown distribution: "
                         f"{bp.get('distro') or self.distro.name} for arch {arch}")
        type_name = cr.get("compose_type", "")
        try:
            image_type = self.distro.get_image_type(type_name)
        except LookupError as exc:
            return error(400, "ComposeError", f'Failed to get compose type "{type_name}": {exc}')
        return ComposeTarget(bp, image_type, cr.get("ostree"))

    def _committed(self, name: str) -> dict[str, Any] | Reply:
        """GetBlueprintCommitted, after verifyStringsWithRegex on the name."""
        if not name or not VALID_NAME.match(name):
            return error(400, "InvalidChars", "Invalid characters in API path")
        bp = self.blueprints.get(name)
        if bp is None:
            return error(400, "UnknownBlueprint", f"Unknown blueprint name: {name}")
        return bp

    def _resolve_and_queue(self, bp: dict[str, Any], image_type: ImageType,
                           ostree: dict[str, Any], warnings: list[str]) -> Reply:
        containers: list[dict[str, str]] = []
        if image_type.kind in ("commit", "container"):
            try:
                containers = resolve_containers(bp.get("containers", []), self.scenario.registry)
            except ResolveError as exc:
                return error(500, "ContainerResolveError", str(exc))
        ref = ostree.get("ref") or self.distro.default_ref("x86_64")
        url = ostree.get("url") or ""
        compose = Compose(id=str(uuidlib.uuid4()), blueprint=copy.deepcopy(bp),
                          image_type=image_type, ref=ref, url=url,
                          containers=tuple(containers))
        try:
            if image_type.kind == "installer":
                url = url or self.distro.installer_default_url or ""
                compose.payload = resolve_ref(url, ref)
            elif url:  # images.go makeOSTreeParentCommit: no parent given means the ref itself
                compose.parent = resolve_ref(url, ostree.get("parent") or ref)
        except ResolveError as exc:
            return error(400, "OSTreeOptionsError", str(exc))
        with self.lock:
            self.composes[compose.id] = compose
        # ComposeReply.Warnings is a nil slice when there are none: JSON null.
        return ok({"build_id": compose.id, "status": True, "warnings": warnings or None})

    def compose_status(self, req: Request) -> Reply:
        """api.go composeStatusHandler: unknown uuids are left out, bad ones are a 400."""
        time.sleep(self.scenario.status_delay)
        if req.param == "*":
            ids = list(self.composes)
        else:
            ids = []
            for text in req.param.split(","):
                parsed = parse_uuid(text)
                if parsed is None:
                    return error(400, "UnknownUUID", f"{text} is not a valid build uuid")
                ids.append(parsed)
        entries = []
        for compose_id in sorted(set(ids)):  # sortComposeEntries: by id
            compose = self.composes.get(compose_id)
            if compose is None:
                continue
            with self.lock:
                compose.polls += 1
            entries.append(self._entry(compose))
        return ok({"uuids": entries})

    def compose_image(self, req: Request) -> Reply:
        """api.go composeImageHandler."""
        compose, failure = self._lookup(req.param)
        if compose is None:
            return failure
        state = self.state(compose)
        if state != "FINISHED":
            return error(400, "BuildInWrongState",
                         f"Build {req.param} is in wrong state: {state}")
        payload = compose.artifact or b""
        return 200, compose.image_type.mime_type, payload, {
            "Content-Disposition": f"attachment; filename={compose.id}-"
                                   f"{compose.image_type.filename}"}

    def compose_log(self, req: Request) -> Reply:
        """api.go composeLogHandler."""
        compose, failure = self._lookup(req.param)
        if compose is None:
            return failure
        state = self.state(compose)
        if state == "WAITING":
            # "weirdly, Lorax returns 200 in this case"
            return error(200, "BuildInWrongState",
                         f"Build {req.param} has not started yet. No logs to view.")
        if state == "RUNNING":
            return 200, "text/plain", f"Build {req.param} is still running.\n".encode(), {}
        return 200, "text/plain", (compose.failure or self.scenario.log).encode(), {}

    # -- helpers ----------------------------------------------------------------------------

    def state(self, compose: Compose) -> str:
        states = self.scenario.states
        state = states[min(max(compose.polls - 1, 0), len(states) - 1)]
        if state == "FINISHED":
            self._build(compose)
            if compose.failure is not None:
                return "FAILED"
        return state

    def _build(self, compose: Compose) -> None:
        """The worker's osbuild job, run once when the compose first reaches FINISHED."""
        with self.lock:
            if compose.artifact is not None or compose.failure is not None:
                return
            if compose.parent is not None:
                problem = parent_fetch_problem(compose.url, compose.parent)
                if problem is not None:
                    compose.failure = f"Stage org.osbuild.ostree.passwd\n{problem}\n"
                    return
            if compose.image_type.kind == "commit":
                compose.artifact, compose.commit = build_commit_tarball(self.workdir, BuildRequest(
                    compose.id, self.distro, compose.blueprint, compose.ref, compose.parent,
                    compose.containers))
            else:
                compose.artifact = (b"\0" * 32768 + b"CD001 fake " + compose.image_type.name
                                    .encode() + b" for " + compose.id.encode() + b" embedding "
                                    + f"{compose.ref}={compose.payload}".encode())

    def _lookup(self, text: str) -> tuple[Compose | None, Reply]:
        parsed = parse_uuid(text)
        if parsed is None:
            return None, error(400, "UnknownUUID", f"{text} is not a valid build uuid")
        compose = self.composes.get(parsed)
        if compose is None:
            return None, error(400, "UnknownUUID", f"Compose {text} doesn't exist")
        return compose, ok({})

    def _entry(self, compose: Compose) -> dict[str, Any]:
        """internal/weldr/compose.go composeToComposeEntry."""
        state = self.state(compose)
        entry: dict[str, Any] = {
            "id": compose.id, "blueprint": compose.blueprint["name"],
            "version": compose.blueprint["version"], "compose_type": compose.image_type.name,
            "image_size": 0, "queue_status": state, "job_created": compose.created}
        if state != "WAITING":
            entry["job_started"] = compose.created + 1
        if state in ("FINISHED", "FAILED"):
            entry["job_finished"] = compose.created + 2
        return entry

def _compose_request(body: bytes) -> dict[str, Any] | None:
    """Decode a ComposeRequest as encoding/json would; None for a decode error."""
    try:
        cr = json.loads(body)
    except ValueError:
        return None
    if not isinstance(cr, dict):
        return None
    for key in ("blueprint_name", "compose_type", "branch"):
        if key in cr and not isinstance(cr[key], str):
            return None
    ostree = cr.get("ostree")
    if ostree is not None:
        if not isinstance(ostree, dict):
            return None
        for key in ("ref", "parent", "url", "contenturl"):
            if key in ostree and not isinstance(ostree[key], str):
                return None
    return cr


def _dependencies(bp: dict[str, Any]) -> list[dict[str, Any]]:
    deps = []
    for pkg in bp.get("packages", []):
        version = str(pkg.get("version") or "1.0").replace("*", "1.0")
        ver, _, rel = version.partition("-")
        deps.append({"name": pkg["name"], "epoch": 0, "version": ver,
                     "release": rel or "1.el9", "arch": "x86_64"})
    return deps


