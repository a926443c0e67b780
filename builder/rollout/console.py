"""The fleet console: the collector's web pages (`rollout serve`, same port as /verdicts).

    GET  /                     -> /console/
    GET  /console/             the page (builder/rollout/web/: HTML, script and style that
                               ship in the package; nothing is fetched from elsewhere)
    GET  /api/overview         every ref's `rollout status --json`, past rollouts, actions
    GET  /api/devices          `rollout devices --json` (?silent_after=HOURS)
    GET  /api/verdicts         the newest verdicts (?limit=N, at most 500)
    POST /api/actions/ACTION   advance | halt | resume, JSON {"ref", "reason", "force"}

Who may do what is the admin's choice when starting the collector: the read-only API is open
to whoever reaches the listen address unless `--viewer-token-file` names a token it then
requires; the actions need `--admin-token-file`'s token, which devices never hold (they
only POST signed verdicts). Tokens travel in `Authorization: Bearer`, which the page keeps
in the tab's sessionStorage: a browser never attaches it by itself, so another site cannot
make an admin's browser act (CSRF). The actions also refuse what a cross-site form could
send: a body that is not JSON, an Origin other than the collector's own, a Sec-Fetch-Site
other than same-origin. Ten wrong tokens from one address in a minute: that address waits.

An action does exactly what the command of the same name does (builder/rollout/admin.py:
the same statements lock, the same signed statement), and refuses with the same message.
"""

from __future__ import annotations

import hmac
import json
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from builder.core.errors import BuildError, InputError
from builder.rollout import history
from builder.rollout.admin import Signer, Site, advance, halt, resume, status
from builder.rollout.inventory import SILENT_AFTER, inventory, inventory_json
from builder.rollout.store import Store

MAX_ACTION = 4096       # bytes of an action's JSON body
MAX_REASON = 200        # characters of a halt reason (devices show it)
MIN_TOKEN = 16
FAILURES_PER_MINUTE = 10
PAGES = {"index.html": "text/html", "console.js": "text/javascript",
         "console.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def read_token(path: Path, option: str) -> str:
    """A token file: one line of at least MIN_TOKEN characters, readable by its owner only."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeError) as exc:
        raise InputError(str(path), "", f"cannot be read for {option} ({exc})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(str(path), "", f"is readable by others (mode {stat.filemode(mode)})"
                         f"; {option} must be private", hint=f"chmod 600 {path}")
    if len(text) < MIN_TOKEN or any(c.isspace() for c in text) or not text.isprintable():
        raise InputError(str(path), "", f"is not a token: one line of at least {MIN_TOKEN} "
                         "printable characters without spaces", hint="openssl rand -hex 32")
    return text


@dataclass
class Console:
    site: Site
    store: Store
    signer: Signer | None
    admin_token: str | None = None
    viewer_token: str | None = None
    log: Callable[[str], None] = print
    clock: Callable[[], float] = time.time
    failures: dict[str, list[float]] = field(default_factory=dict)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.home)
        app.router.add_get("/console/", self.page)
        app.router.add_get("/console/{name}", self.page)
        app.router.add_get("/api/overview", self.guard(self.overview, admin=False))
        app.router.add_get("/api/devices", self.guard(self.devices, admin=False))
        app.router.add_get("/api/verdicts", self.guard(self.verdicts, admin=False))
        app.router.add_post("/api/actions/{action}", self.guard(self.action, admin=True))

    async def home(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    async def page(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name") or "index.html"
        if name not in PAGES:
            raise web.HTTPNotFound()
        body = resources.files("builder.rollout").joinpath("web", name).read_bytes()
        return web.Response(body=body, content_type=PAGES[name], charset="utf-8",
                            headers=SECURITY_HEADERS)

    def guard(self, handler: Handler, *, admin: bool) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            refused = self._refusal(request, admin=admin)
            if refused is not None:
                return refused
            return await handler(request)
        return guarded

    def _refusal(self, request: web.Request, *, admin: bool) -> web.Response | None:
        peer = request.remote or "?"
        now = self.clock()
        recent = [t for t in self.failures.pop(peer, []) if now - t < 60]
        if recent:   # an address with no recent failure keeps no entry: the map stays small
            self.failures[peer] = recent
        if len(recent) >= FAILURES_PER_MINUTE:
            return _answer(429, "too many wrong tokens from this address; wait a minute")
        if admin and self.admin_token is None:
            return _answer(403, "actions are off: the collector was started without "
                                "--admin-token-file")
        wanted = [self.admin_token] if admin else [self.viewer_token, self.admin_token]
        if admin or self.viewer_token is not None:
            given = request.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not any(
                    expected and hmac.compare_digest(token.encode(), expected.encode())
                    for expected in wanted):
                self.failures[peer] = [*recent, now]
                self.log(f"console: a wrong or missing {'admin' if admin else 'viewer'} "
                         f"token from {peer}")
                return _answer(401, "a valid " + ("admin" if admin else "viewer") +
                               " token is needed (Authorization: Bearer TOKEN)")
        return _cross_site(request) if admin else None

    async def overview(self, request: web.Request) -> web.Response:
        now = int(self.clock())
        reports: dict[str, Any] = {}
        for ref in sorted(self.site.rollouts()):
            try:
                reports[ref] = status(self.site, self.store, ref, now)
            except BuildError as exc:
                reports[ref] = {"ref": ref, "error": str(exc)}
        return _json({"now": now, "rollouts": reports,
                      "history": history.rollouts(self.store.db),
                      "actions": history.actions(self.store.db, 50),
                      "actions_enabled": self.admin_token is not None,
                      "can_sign": self.signer is not None,
                      "viewer_token_required": self.viewer_token is not None})

    async def devices(self, request: web.Request) -> web.Response:
        hours = _number(request, "silent_after", SILENT_AFTER / 3600, 0.01, 24 * 365)
        silent_after = int(hours * 3600)
        found = inventory(self.store, int(self.clock()), silent_after)
        return web.Response(text=inventory_json(found, silent_after),
                            content_type="application/json", headers=SECURITY_HEADERS)

    async def verdicts(self, request: web.Request) -> web.Response:
        limit = int(_number(request, "limit", 100, 1, history.MAX_TIMELINE))
        return _json({"verdicts": history.timeline(self.store.db, limit)})

    async def action(self, request: web.Request) -> web.Response:
        name = request.match_info["action"]
        if name not in ("advance", "halt", "resume"):
            return _answer(404, f"no action {name!r}: advance, halt or resume")
        body = await _action_body(request)
        if isinstance(body, web.Response):
            return body
        ref, reason, force = body
        if self.signer is None:
            return _answer(503, "the collector has no release key (--gpg-homedir/--gpg-key):"
                                " it cannot sign the statement an action changes")
        return self._act(name, ref, reason, force)

    def _act(self, name: str, ref: str | None, reason: str, force: bool) -> web.Response:
        assert self.signer is not None
        now = int(self.clock())
        if ref is not None and ref not in self.site.rollouts():
            return _answer(404, f"no rollout on ref {ref!r}")
        try:
            if name == "advance":
                rollout = advance(self.site, self.store, self.signer, ref, now, force=force)
            elif name == "halt":
                rollout = halt(self.site, self.signer, ref, reason or "halted from the console")
            else:
                rollout = resume(self.site, self.signer, ref, self.store, now)
        except BuildError as exc:
            history.record_action(self.store.db, when=now, ref=ref or "", rollout="",
                                  action=name, outcome="refused", detail=str(exc),
                                  source="console")
            return _answer(409, str(exc))
        ref = ref or self.site.statement(None)[0]
        detail = rollout.state + (f": {rollout.reason}" if rollout.reason else "")
        history.record_action(self.store.db, when=now, ref=ref, rollout=rollout.id,
                              action=name, outcome="done", detail=detail, source="console")
        self.log(f"console: {name} of rollout {rollout.id} on {ref}: {detail}")
        return _json({"done": name, "ref": ref, "rollout": rollout.to_dict()})


def _cross_site(request: web.Request) -> web.Response | None:
    """What a page of another site could make a browser send: refused."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return _answer(403, f"a cross-site request (Sec-Fetch-Site: {fetch_site[:40]})")
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return _answer(403, f"a request from another origin ({origin[:80]})")
    if request.content_type != "application/json":
        return _answer(415, "an action's body is JSON (Content-Type: application/json)")
    return None


class _Bad(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _action_body(request: web.Request) -> tuple[str | None, str, bool] | web.Response:
    """(ref, reason, force) of an action's body, or the answer refusing it."""
    try:
        raw = await request.content.read(MAX_ACTION + 1)
        if len(raw) > MAX_ACTION:
            raise _Bad(413, f"an action's body is at most {MAX_ACTION} bytes")
        return _action_fields(raw)
    except _Bad as bad:
        return _answer(bad.code, str(bad))


def _action_fields(raw: bytes) -> tuple[str | None, str, bool]:
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise _Bad(400, "the body is not JSON") from None
    if not isinstance(body, dict) or set(body) - {"ref", "reason", "force"}:
        raise _Bad(400, "the body is an object with ref, reason and force only")
    ref, reason, force = body.get("ref"), body.get("reason", ""), body.get("force", False)
    if ref is not None and (not isinstance(ref, str) or not 0 < len(ref) <= 255):
        raise _Bad(400, "ref: a string of 1 to 255 characters, or absent")
    if not isinstance(reason, str) or len(reason) > MAX_REASON or not reason.isprintable():
        raise _Bad(400, f"reason: printable text of at most {MAX_REASON} characters")
    if not isinstance(force, bool):
        raise _Bad(400, "force: true or false")
    return ref, reason.strip(), force


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: not a number") from None
    if not low <= value <= high:
        raise web.HTTPBadRequest(text=f"{name}: from {low:g} to {high:g}")
    return value


def _json(document: dict[str, Any], status_code: int = 200) -> web.Response:
    return web.Response(text=json.dumps(document, sort_keys=True), status=status_code,
                        content_type="application/json", headers=SECURITY_HEADERS)


def _answer(code: int, message: str) -> web.Response:
    return _json({"error": message}, code)
