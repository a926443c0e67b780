"""The collector: devices POST their signed verdicts here (`python -m builder rollout serve`).

    POST /verdicts    one verdict (builder/updater/verdicts.py): 201 recorded, 200 an
                      identical resend, 4xx refused (builder/rollout/verify.py), counted
    GET  /status      `rollout status --json` of every ref with a rollout
    GET  /healthz     200 while the collector runs

An aiohttp application; each verdict is checked and recorded in one SQLite transaction
that commits before the answer (builder/rollout/store.py). A rolled-back verdict that takes
its wave over the halt threshold halts the rollout there and then: the statement is
re-signed as halted (builder/rollout/admin.py) before the device is answered. It speaks
plain HTTP: verdicts are signed, so nobody can forge one, but they are not confidential;
put a TLS reverse proxy in front of it where that matters (README).

`rollout collect` takes the same verdicts from files (the outboxes of sites with no link,
copied to a USB stick).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from builder.core.errors import BuildError
from builder.rollout.admin import Signer, Site, halt_if_over, status
from builder.rollout.store import Store
from builder.rollout.verify import Refused, Verdict, check
from builder.updater.verdicts import MAX_VERDICT


@dataclass
class Collector:
    site: Site
    store: Store
    signer: Signer | None
    enrolled_only: bool
    log: Callable[[str], None]

    def take(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """(HTTP status, answer) for one verdict; every refusal is counted."""
        try:
            verdict = check(body)
        except Refused as refused:
            self.store.refuse(refused.reason)
            return refused.status, {"refused": refused.reason, "detail": refused.detail}
        try:
            new = self.store.record(verdict, enrolled_only=self.enrolled_only,
                                    known=self._known(verdict))
        except Refused as refused:
            return refused.status, {"refused": refused.reason, "detail": refused.detail}
        answer: dict[str, Any] = {"recorded": new}
        if new and verdict.event == "rolled-back" and self.signer is not None:
            reason = halt_if_over(self.site, self.store, self.signer, verdict)
            if reason:
                self.log(f"halted rollout {verdict.rollout}: {reason}")
                answer["halted"] = reason
        return (201 if new else 200), answer

    def _known(self, verdict: Verdict) -> bool:
        try:
            _, _, rollout = self.site.statement(verdict.ref)
        except BuildError:
            return False
        return rollout.id == verdict.rollout and rollout.commit == verdict.commit

    def collect(self, paths: list[Path]) -> dict[str, int]:
        """Verdict files (or directories of them): counted by what became of each."""
        tally: dict[str, int] = {}
        for path in paths:
            for file in sorted(path.glob("*.json")) if path.is_dir() else [path]:
                try:
                    body = file.read_bytes()
                except OSError as exc:
                    raise BuildError(f"{file}: {exc.strerror or exc}") from exc
                code, answer = self.take(body)
                what = answer.get("refused") or ("recorded" if code == 201 else "duplicate")
                tally[what] = tally.get(what, 0) + 1
        return tally


def make_app(collector: Collector) -> web.Application:
    # Bodies up to the limit plus one reach the handler, which counts what is over it.
    app = web.Application(client_max_size=MAX_VERDICT + 1)

    async def verdicts(request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            collector.store.refuse("too-large")
            return web.json_response({"refused": "too-large"}, status=413)
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
    return app


def serve(collector: Collector, host: str, port: int,
          ready: Callable[[str], None]) -> None:
    """Serve until stopped (SIGTERM or SIGINT end it cleanly; SIGKILL loses nothing)."""
    async def main() -> None:
        runner = web.AppRunner(make_app(collector), handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        ready(f"http://{host}:{bound}/verdicts")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt, web.GracefulExit):
        asyncio.run(main())
