"""Update windows placed around the real clock (the updater reads the real time): one open
now and one that opens in three hours, daily, in UTC."""

from __future__ import annotations

import datetime as dt


def window(start_hours: float, end_hours: float) -> str:
    """A daily window from now + start to now + end, in UTC."""
    now = dt.datetime.now(dt.UTC)
    start, end = (now + dt.timedelta(hours=h) for h in (start_hours, end_hours))
    return f"{start:%H:%M}-{end:%H:%M}"


OPEN, CLOSED = window(-2, 2), window(3, 5)
