"""A small, typed client for osbuild-composer's Weldr API (what `composer-cli` speaks).

Endpoints and response shapes follow osbuild/osbuild-composer internal/weldr/api.go
(setupRouter, blueprintsNewHandler, blueprintsDepsolveHandler, composeHandler,
composeStatusHandler, composeImageHandler, composeLogHandler) and internal/weldr/json.go:

- errors are `{"status": false, "errors": [{"id": ..., "msg": ...}]}` with a 4xx/5xx code,
  except /blueprints/depsolve and /blueprints/info, which answer 200 with per-blueprint
  `errors` in the body; an unknown route is a JSON 404 HTTPError (notFoundHandler);
- /compose/status/<uuid> answers `{"uuids": [...]}` and an unknown (well-formed) uuid is
  simply absent from the list; uuids are parsed with google/uuid, so upper-case, braced and
  urn: forms are accepted and the answer is always the lower-case dashed form;
- POST /compose answers `{build_id, status, warnings}`, `warnings` being null when empty;
- a failed depsolve (500 DepsolveError) or container resolution (500 ContainerResolveError)
  during POST /compose is a real answer, not a transient failure, so only 502/503/504 and
  dropped connections are retried;
- GET /compose/types lists what the host distro builds: `{"types": [{"name", "enabled"}]}`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from urllib3.exceptions import NewConnectionError

from builder.core.errors import BuildError
from builder.core.progress import Progress, human_bytes
from builder.imagebuilder.bounds import (
    IMAGE_MAX_BYTES,
    AnswerDeadline,
    answer_deadline,
    read_bounded,
)
from builder.imagebuilder.transport import UNIX_HOST, UNIX_SCHEME, unix_session

DEFAULT_SOCKET = Path("/run/weldr/api.socket")
API_PREFIX = "/api/v1"
TRANSIENT_STATUS = frozenset({502, 503, 504})
SOCKET_HINT = ("is osbuild-composer.socket running? "
               "`systemctl enable --now osbuild-composer.socket`")
DOWNLOAD_CHUNK = 1024 * 1024
# Report download progress every this many bytes, so a multi-GiB ISO shows it is moving.
DOWNLOAD_REPORT_EVERY = 64 * 1024 * 1024
HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def normalize_uuid(text: str) -> str | None:
    """A compose id as the service answers it (lower-case, dashed), or None when `text` is
    not one. Accepts what google/uuid Parse accepts: plain, {braced}, urn:uuid: and 32 hex
    digits, in any case."""
    if len(text) == 45 and text[:9].lower() == "urn:uuid:":
        text = text[9:]
    elif len(text) == 38 and text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if len(text) == 36 and all(text[i] == "-" for i in (8, 13, 18, 23)):
        digits = text.replace("-", "")
    elif len(text) == 32:
        digits = text
    else:
        return None
    if len(digits) != 32 or not set(digits) <= HEX_DIGITS:
        return None
    digits = digits.lower()
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


@dataclass(frozen=True)
class Endpoint:
    """Where the service listens: a unix socket (the default) or an http(s):// URL."""

    socket: Path | None = DEFAULT_SOCKET
    url: str | None = None

    def describe(self) -> str:
        return f"socket {self.socket}" if self.url is None else f"URL {self.url}"

    def base(self) -> str:
        if self.url is not None:
            return self.url.rstrip("/")
        return f"{UNIX_SCHEME}://{UNIX_HOST}"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for transient failures (502/503/504, dropped connections)."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, failed_attempts: int) -> float:
        return float(min(self.max_delay, self.base_delay * 2 ** (failed_attempts - 1)))


@dataclass(frozen=True)
class ServiceError:
    id: str
    msg: str


class ComposerError(BuildError):
    """The service answered with an error: `composer: ID: msg`."""

    def __init__(self, errors: list[ServiceError], status_code: int, what: str) -> None:
        self.errors = errors
        self.status_code = status_code
        detail = "; ".join(f"{e.id}: {e.msg}" for e in errors) or f"HTTP {status_code}"
        super().__init__(f"composer: {detail}", hint=f"while trying to {what}")


@dataclass(frozen=True)
class StartedCompose:
    uuid: str
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class ComposeStatus:
    uuid: str
    blueprint: str
    version: str
    compose_type: str
    queue_status: str
    image_size: int

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> ComposeStatus:
        uuid = str(entry.get("id", ""))
        return cls(uuid=normalize_uuid(uuid) or uuid, blueprint=str(entry.get("blueprint", "")),
                   version=str(entry.get("version", "")),
                   compose_type=str(entry.get("compose_type", "")),
                   queue_status=str(entry.get("queue_status", "")),
                   image_size=_int(entry.get("image_size")))


class WeldrClient:
    """Talks to osbuild-composer. Every network wait is bounded by `timeout` seconds."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self.clock = clock
        if endpoint.url is None:
            self.session = unix_session(endpoint.socket or DEFAULT_SOCKET)
        else:
            self.session = requests.Session()

    def close(self) -> None:
        self.session.close()

    # -- operations -------------------------------------------------------------------------

    def compose_types(self) -> list[str]:
        """The image types the service builds (GET /compose/types), as it names them."""
        what = "list the image types the service offers"
        body = self._json(self._request("GET", "/compose/types", what=what), what)
        return sorted(str(t.get("name")) for t in _dicts(body.get("types"))
                      if t.get("name") and t.get("enabled", True))

    def blueprint_info(self, name: str) -> dict[str, Any] | None:
        """The blueprint the service holds under `name`, or None when it holds none."""
        what = f"read blueprint {name} from the service"
        body = self._json(self._request("GET", f"/blueprints/info/{name}", what=what), what)
        for entry in _dicts(body.get("blueprints")):
            if entry.get("name") == name:
                return entry
        other = [e for e in _errors(body) if e.id != "UnknownBlueprint"]
        if other:
            raise ComposerError(other, 200, what)
        return None

    def delete_blueprint(self, name: str) -> None:
        what = f"delete blueprint {name} on the service"
        resp = self._request("DELETE", f"/blueprints/delete/{name}", what=what)
        _acknowledged(resp, self._json(resp, what), what)

    def push_blueprint(self, toml_text: str) -> None:
        """POST /blueprints/new with the TOML body, as `composer-cli blueprints push` does."""
        what = "push the blueprint"
        resp = self._request("POST", "/blueprints/new", what=what, data=toml_text.encode(),
                             headers={"Content-Type": "text/x-toml"})
        _acknowledged(resp, self._json(resp, what), what)

    def push_blueprint_json(self, blueprint: dict[str, Any]) -> None:
        what = "push the blueprint"
        resp = self._request("POST", "/blueprints/new", what=what, json_body=blueprint)
        _acknowledged(resp, self._json(resp, what), what)

    def depsolve(self, name: str) -> list[dict[str, Any]]:
        """The blueprint's full package set; raises ComposerError on a depsolve failure."""
        what = f"depsolve blueprint {name}"
        body = self._json(self._request("GET", f"/blueprints/depsolve/{name}", what=what), what)
        # A 200 can still carry errors (UnknownBlueprint, BlueprintsError for DNF failures).
        errors = _errors(body)
        if errors:
            raise ComposerError(errors, 200, what)
        for entry in _dicts(body.get("blueprints")):
            blueprint = entry.get("blueprint")
            if isinstance(blueprint, dict) and blueprint.get("name") == name:
                return list(_dicts(entry.get("dependencies")))
        raise ComposerError([ServiceError("UnknownBlueprint", f"{name}: not in the answer")],
                            200, what)

    def start_compose(self, request: dict[str, Any]) -> StartedCompose:
        what = f"start a {request.get('compose_type')} compose"
        body = self._json(self._request("POST", "/compose", what=what, json_body=request), what)
        build_id = body.get("build_id")
        uuid = normalize_uuid(build_id) if isinstance(build_id, str) else None
        if uuid is None:
            raise BuildError(f"composer: {what}: the answer has no build_id: {body}")
        warnings = body.get("warnings")  # null when there are none
        if not isinstance(warnings, list):
            warnings = [] if warnings is None else [warnings]
        return StartedCompose(uuid, tuple(str(w).strip() for w in warnings if str(w).strip()))

    def status(self, uuid: str) -> ComposeStatus:
        wanted = normalize_uuid(uuid) or uuid  # a malformed id gets the service's own answer
        what = f"get the status of compose {wanted}"
        body = self._json(self._request("GET", f"/compose/status/{wanted}", what=what), what)
        for entry in _dicts(body.get("uuids")):
            if normalize_uuid(str(entry.get("id", ""))) == wanted:
                return ComposeStatus.from_entry(entry)
        # Upstream omits unknown uuids instead of failing; turn that into the UnknownUUID error.
        raise ComposerError([ServiceError("UnknownUUID", f"compose {wanted} does not exist")],
                            200, what)

    def log(self, uuid: str) -> str:
        """The osbuild log of a finished or failed compose (GET /compose/log/<uuid>)."""
        uuid = normalize_uuid(uuid) or uuid
        what = f"fetch the log of compose {uuid}"
        resp = self._request("GET", f"/compose/log/{uuid}", what=what)
        if resp.status_code >= 400 or _looks_like_error(resp):
            self._json(resp, what)  # raises the service's error
        return resp.text

    def download_image(self, uuid: str, dest: Path, progress: Progress) -> int:
        """Stream the artifact to a temp file beside `dest`, rename it when complete."""
        uuid = normalize_uuid(uuid) or uuid
        what = f"download the image of compose {uuid}"
        resp = self._request("GET", f"/compose/image/{uuid}", what=what, stream=True)
        if resp.status_code >= 400:
            self._json(resp, what)
        expected = _content_length(resp, what)
        if expected > IMAGE_MAX_BYTES:
            resp.close()
            raise BuildError(f"composer: {what}: the service announces {human_bytes(expected)}, "
                             f"over the {human_bytes(IMAGE_MAX_BYTES)} an image may have")
        progress.info(f"downloading {uuid} -> {dest}"
                      + (f" ({human_bytes(expected)})" if expected else ""), bytes=expected)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                written = self._copy_body(resp, out, progress, expected, what)
            if expected and written != expected:
                raise BuildError(f"composer: {what}: got {written} of {expected} bytes "
                                 "(connection closed early)", hint="run the fetch again")
            tmp.replace(dest)
        finally:
            resp.close()
            tmp.unlink(missing_ok=True)
        progress.wrote(str(dest), written)
        return written

    # -- plumbing ---------------------------------------------------------------------------

    def _copy_body(self, resp: requests.Response, out: Any, progress: Progress,
                   expected: int, what: str) -> int:
        written, next_report = 0, DOWNLOAD_REPORT_EVERY
        for chunk in self._chunks(resp, what):
            out.write(chunk)
            written += len(chunk)
            if written > IMAGE_MAX_BYTES:
                raise BuildError(f"composer: {what}: the download goes on past "
                                 f"{human_bytes(IMAGE_MAX_BYTES)}: not an image this tool "
                                 "takes (nothing is kept)")
            if written >= next_report:
                total = f" of {human_bytes(expected)}" if expected else ""
                progress.info(f"  {human_bytes(written)}{total}", bytes=written)
                next_report += DOWNLOAD_REPORT_EVERY
        return written

    def _chunks(self, resp: requests.Response, what: str) -> Iterator[bytes]:
        try:
            yield from resp.iter_content(DOWNLOAD_CHUNK)
        except requests.Timeout as exc:
            raise self._timeout_error(what) from exc
        except requests.RequestException as exc:
            raise BuildError(f"composer: {what}: the connection broke mid-download: {exc}",
                             hint="run the fetch again") from exc

    def _request(self, method: str, path: str, *, what: str, json_body: Any = None,
                 data: bytes | None = None, headers: dict[str, str] | None = None,
                 stream: bool = False) -> requests.Response:
        """One answer, retried on transient failures. A whole answer (headers and body) must
        come within `timeout` and hold at most ANSWER_MAX_BYTES; a streamed one (an image
        download) is read by the caller, each read within `timeout`."""
        url = f"{self.endpoint.base()}{API_PREFIX}{path}"
        failures = 0
        while True:
            try:
                with answer_deadline(self.timeout):
                    resp = self.session.request(method, url, json=json_body, data=data,
                                                headers=headers, stream=True,
                                                timeout=self.timeout)
                    if not stream:
                        read_bounded(resp, what)
            except (AnswerDeadline, requests.Timeout) as exc:
                raise self._timeout_error(what) from exc
            except requests.ConnectionError as exc:
                if _refused(exc):
                    raise self._unreachable_error(exc) from exc
                failures += 1
                if failures >= self.retry.attempts:
                    raise BuildError(f"composer: {what}: connection to {self.endpoint.describe()}"
                                     f" kept failing after {failures} attempts: {exc}",
                                     hint=SOCKET_HINT) from exc
            else:
                if resp.status_code not in TRANSIENT_STATUS:
                    return resp
                failures += 1
                if failures >= self.retry.attempts:
                    return resp  # let _json report the service's own error text
                resp.close()
            self.sleep(self.retry.delay(failures))

    def _json(self, resp: requests.Response, what: str) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 400 or (isinstance(body, dict) and body.get("status") is False):
            errors = _errors(body) if isinstance(body, dict) else []
            if not errors:
                text = resp.text.strip().splitlines()[:1]
                errors = [ServiceError(f"HTTP{resp.status_code}", text[0] if text else resp.reason)]
            raise ComposerError(errors, resp.status_code, what)
        if not isinstance(body, dict):
            raise BuildError(f"composer: {what}: expected a JSON object, got: "
                             f"{resp.text[:200]!r}")
        return body

    def _unreachable_error(self, exc: Exception) -> BuildError:
        where = self.endpoint.describe()
        if self.endpoint.url is None:
            return BuildError(f"composer: cannot reach osbuild-composer at {where}: "
                              f"{_root_cause(exc)}", hint=SOCKET_HINT)
        return BuildError(f"composer: cannot reach osbuild-composer at {where}: "
                          f"{_root_cause(exc)}",
                          hint="check the URL and that the service listens there")

    def _timeout_error(self, what: str) -> BuildError:
        return BuildError(f"composer: {what}: no answer from {self.endpoint.describe()} "
                          f"within {self.timeout:g}s (a whole answer: headers and body)",
                          hint="the service may be overloaded; raise --timeout")


def _acknowledged(resp: requests.Response, body: dict[str, Any], what: str) -> None:
    if body.get("status") is not True:
        raise BuildError(f"composer: {what}: the service's answer is not a Weldr "
                         f"acknowledgement ({{\"status\": true}}): {resp.text[:120]!r}")


def _content_length(resp: requests.Response, what: str) -> int:
    """The announced size of a download (0: not announced); a malformed one is the service's
    error, not ours to guess at."""
    value = resp.headers.get("Content-Length", "").strip()
    if not value:
        return 0
    if not value.isdigit():
        resp.close()
        raise BuildError(f"composer: {what}: the answer's Content-Length {value!r} is not a "
                         "size in bytes", hint="check the service, or a proxy in front of it")
    return int(value)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list; anything else in an answer is ignored, not a crash."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _errors(body: dict[str, Any]) -> list[ServiceError]:
    found = []
    items = body.get("errors") or []
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, dict):
            found.append(ServiceError(str(item.get("id", "Error")), str(item.get("msg", ""))))
        else:  # lorax-era servers sent bare strings
            found.append(ServiceError("Error", str(item)))
    return found


def _looks_like_error(resp: requests.Response) -> bool:
    """/compose/log answers 200 with a JSON error for a compose that has not started."""
    if not resp.headers.get("Content-Type", "").startswith("application/json"):
        return False
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") is False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """Every exception wrapped inside `exc` (requests -> urllib3 -> OSError)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        stack.extend(a for a in cur.args if isinstance(a, BaseException))
        reason = getattr(cur, "reason", None)
        if isinstance(reason, BaseException):
            stack.append(reason)
        stack.extend(e for e in (cur.__cause__, cur.__context__) if e is not None)


def _refused(exc: BaseException) -> bool:
    """True when nothing listens (missing socket, refused, unknown host): retrying won't help."""
    return any(isinstance(e, NewConnectionError | ConnectionRefusedError | FileNotFoundError)
               for e in _chain(exc))


def _root_cause(exc: BaseException) -> str:
    for e in _chain(exc):
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    return str(exc)
