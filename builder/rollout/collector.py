"""The collector: devices POST their signed verdicts here (`python -m builder rollout serve`).

    POST /verdicts    one verdict (builder/updater/verdicts.py): 201 recorded, 200 an
                      identical resend, 4xx refused (builder/rollout/verdict_check.py), counted
    GET  /status      `rollout status --json` of every ref with a rollout
    GET  /healthz     200 while the collector runs
    /console/, /api/  the fleet console (builder/rollout/console.py)

An aiohttp application; each verdict is checked and recorded in one SQLite transaction
that commits before the answer (builder/rollout/store.py). Every connection serves one
request and has deadlines (`Limits`): complete request headers within `header_seconds` of
connecting, the whole request within `request_seconds`; a client slower than that is
dropped with one log line, as is one that hangs up (no traceback). A rolled-back verdict that takes
its wave over the halt threshold halts the rollout there and then: the statement is
re-signed as halted (builder/rollout/admin.py) before the device is answered; so are the
slots of a disruption budget, granted anew after each verdict (builder/rollout/budget.py).
It speaks
plain HTTP: verdicts are signed, so nobody can forge one, but they are not confidential;
put a TLS reverse proxy in front of it where that matters (README).

`rollout collect` takes the same verdicts from files (the outboxes of sites with no link,
copied to a USB stick).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientConnectionResetError, ClientError, web

from builder.core.errors import BuildError
from builder.rollout import history
from builder.rollout.admin import Signer, Site, halt_if_over, status
from builder.rollout.budget import regrant
from builder.rollout.console import Console
from builder.rollout.guard import guarded
from builder.rollout.store import MAX_VERDICTS, Store
from builder.rollout.verdict_check import Refused, Verdict, check
from builder.updater.verdicts import MAX_VERDICT
from builder.updater.waves import Rollout


@dataclass(frozen=True)
class Limits:
    header_seconds: float = 10.0    # to send the request line and headers
    request_seconds: float = 30.0   # to send the whole request
    max_verdicts: int = MAX_VERDICTS   # per device and rollout


@dataclass
class Collector:
    site: Site
    store: Store
    signer: Signer | None
    enrolled_only: bool
    log: Callable[[str], None]
    limits: Limits = field(default_factory=Limits)

    def take(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """(HTTP status, answer) for one verdict; every refusal is counted."""
        try:
            verdict = check(body)
        except Refused as refused:
            self.store.refuse(refused.reason)
            return refused.status, {"refused": refused.reason, "detail": refused.detail}
        rollout = self._rollout(verdict)
        try:
            new = self.store.record(verdict, enrolled_only=self.enrolled_only,
                                    rollout=rollout, max_verdicts=self.limits.max_verdicts)
        except Refused as refused:
            return refused.status, {"refused": refused.reason, "detail": refused.detail}
        answer: dict[str, Any] = {"recorded": new}
        if new and verdict.event == "rolled-back" and self.signer is not None:
            reason = halt_if_over(self.site, self.store, self.signer, verdict)
            if reason:
                self.log(f"halted rollout {verdict.rollout}: {reason}")
                history.record_action(self.store.db, when=int(time.time()), ref=verdict.ref,
                                      rollout=verdict.rollout, action="halt", outcome="done",
                                      detail=reason, source="collector")
                answer["halted"] = reason
        if new and rollout is not None and rollout.budget is not None:
            granted = regrant(self.site, self.store, self.signer, ref=verdict.ref,
                              rollout_id=verdict.rollout)
            if granted is not None and granted.budget is not None:
                self.log(f"rollout {granted.id}: budget slots now "
                         f"{dict(granted.budget.grants) or 'none'}")
        return (201 if new else 200), answer

    def _rollout(self, verdict: Verdict) -> Rollout | None:
        """The published rollout the verdict names, or None."""
        try:
            _, _, rollout = self.site.statement(verdict.ref)
        except BuildError:
            return None
        if rollout.id == verdict.rollout and rollout.commit == verdict.commit:
            return rollout
        return None

    def collect(self, paths: list[Path]) -> tuple[dict[str, int], list[str]]:
        """Verdict files (or directories of them): counted by what became of each, and
        one line for each file refused or unreadable. One bad file never stops the rest."""
        tally: dict[str, int] = {}
        problems: list[str] = []
        for path in paths:
            for file in sorted(path.glob("*.json")) if path.is_dir() else [path]:
                try:
                    with file.open("rb") as handle:
                        body = handle.read(MAX_VERDICT + 1)
                except OSError as exc:
                    tally["unreadable"] = tally.get("unreadable", 0) + 1
                    problems.append(f"{file}: cannot be read ({exc.strerror or exc})")
                    continue
                code, answer = self.take(body)
                what = answer.get("refused") or ("recorded" if code == 201 else "duplicate")
                tally[what] = tally.get(what, 0) + 1
                if "refused" in answer:
                    problems.append(f"{file}: refused ({what}): {answer['detail']}")
        return tally, problems


def make_app(collector: Collector, console: Console | None = None) -> web.Application:
    # Bodies up to the limit plus one reach the handler, which counts what is over it.
    app = web.Application(client_max_size=MAX_VERDICT + 1, middlewares=[_one_request])

    async def verdicts(request: web.Request) -> web.Response:
        try:
            body = await asyncio.wait_for(request.read(), collector.limits.request_seconds)
        except web.HTTPRequestEntityTooLarge:
            collector.store.refuse("too-large")
            return web.json_response({"refused": "too-large"}, status=413)
        except TimeoutError:
            collector.log(f"dropped a slow client {request.remote}: no whole verdict within "
                          f"{collector.limits.request_seconds:g} s")
            return web.json_response({"refused": "too-slow"}, status=408)
        except (ConnectionError, ClientError) as exc:
            collector.log(f"a client {request.remote} hung up before its verdict was whole "
                          f"({type(exc).__name__})")
            raise web.HTTPBadRequest() from None
        code, answer = collector.take(body)
        return web.json_response(answer, status=code)

    async def report(request: web.Request) -> web.Response:
        now = int(time.time())
        return web.json_response({ref: status(collector.site, collector.store, ref, now)
                                  for ref in sorted(collector.site.rollouts())})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"verdicts": collector.store.verdict_count()})

    app.router.add_post("/verdicts", verdicts)
    app.router.add_get("/status", report)
    app.router.add_get("/healthz", healthz)
    if console is not None:
        console.routes(app)
    return app


@web.middleware
async def _one_request(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every answer closes its connection: a connection's deadlines (builder/rollout/guard.py)
    then bound all it does, and no idle kept-alive connection waits for a slow client."""
    response: web.StreamResponse = await handler(request)
    response.force_close()
    return response


def serve(collector: Collector, host: str, port: int, ready: Callable[[str], None],
          console: Console | None = None) -> None:
    """Serve until stopped (SIGTERM or SIGINT end it cleanly; SIGKILL loses nothing)."""
    limits = collector.limits

    async def main() -> None:
        # access_log=None: a line per verdict is the store's to count; hang-ups and slow
        # clients get a line of their own, and aiohttp's tracebacks for them are silenced.
        # lingering_time: after answering a request whose body it did not read (too large,
        # too slow), aiohttp reads on for a while so the client sees the answer; 2 s, not
        # its 10, or a slow client keeps the connection that long.
        runner = web.AppRunner(make_app(collector, console), handle_signals=True, access_log=None,
                               lingering_time=2.0)
        await runner.setup()
        loop = asyncio.get_running_loop()
        assert runner.server is not None  # made by setup()
        lifetime = limits.header_seconds + limits.request_seconds + 30.0
        server = await loop.create_server(
            guarded(runner.server, limits.header_seconds, lifetime, collector.log),
            host, port, reuse_address=True)
        bound = server.sockets[0].getsockname()[1] if server.sockets else port
        ready(f"http://{host}:{bound}/verdicts")
        try:
            await asyncio.Event().wait()
        finally:
            server.close()
            await runner.cleanup()

    quiet = _Quiet()
    for name in ("aiohttp.server", "aiohttp.web", "asyncio"):
        logging.getLogger(name).addFilter(quiet)
    try:
        with contextlib.suppress(KeyboardInterrupt, web.GracefulExit):
            asyncio.run(main())
    finally:
        for name in ("aiohttp.server", "aiohttp.web", "asyncio"):
            logging.getLogger(name).removeFilter(quiet)


class _Quiet(logging.Filter):
    """A client that hangs up is not the collector's error: aiohttp and asyncio log such a
    connection's end with a traceback; the collector's own line says it instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, (ConnectionError, ClientConnectionResetError))
