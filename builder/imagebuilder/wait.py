"""Follow a compose on the service until it ends; a FAILED one becomes one error with its log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from builder.core.errors import BuildError
from builder.core.progress import Progress

if TYPE_CHECKING:
    # Only for annotations: importing requests costs ~100 ms on every CLI start.
    from builder.imagebuilder.client import ComposeStatus, WeldrClient

LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class WaitOptions:
    poll_interval: float = 5.0
    timeout: float | None = None
    # While the state does not change, repeat it this often so a long compose looks alive.
    report_every: float = 60.0


def elapsed(seconds: float) -> str:
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
            progress.info(f"compose {status.uuid}: {state} ({elapsed(now - started)} elapsed)",
                          uuid=status.uuid, state=state, elapsed=round(now - started, 1))
            last_state, last_report = state, now
        if state == "FINISHED":
            return status
        if state == "FAILED":
            raise compose_failed(client, status)
        if options.timeout is not None and now - started >= options.timeout:
            raise BuildError(f"composer: compose {status.uuid} is still {state} after "
                             f"{elapsed(now - started)}",
                             hint=f"it keeps running on the service; follow it with "
                             f"`python -m builder composer status {status.uuid} --wait` or "
                             "raise --wait-timeout")
        client.sleep(options.poll_interval)


def compose_failed(client: WeldrClient, status: ComposeStatus) -> BuildError:
    """A FAILED compose as one error naming the uuid, with the last lines of its log."""
    try:
        lines = [ln for ln in client.log(status.uuid).splitlines() if ln.strip()]
        tail = "\n".join("    " + ln for ln in lines[-LOG_TAIL_LINES:]) or "    (log is empty)"
    except BuildError as exc:
        tail = f"    (log unavailable: {exc.message})"
    return BuildError(f"composer: compose {status.uuid} FAILED ({status.compose_type} of "
                      f"blueprint {status.blueprint} {status.version}); last log lines:\n{tail}",
                      hint=f"full log: GET /api/v1/compose/log/{status.uuid} "
                      f"(composer-cli compose log {status.uuid})")
