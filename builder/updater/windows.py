"""Time windows of update.yaml: when a device may download, stage and reboot.

A window is `[DAYS ]HH:MM-HH:MM` in the device's time zone (update.yaml's `time_zone`, else
its local time): `02:00-04:30`, `Sat,Sun 01:00-05:00`, `Mon-Fri 22:00-02:00`. It may wrap
past midnight; the hours after midnight belong to the day it opened on. This is what
flightctl's update schedules say with a daily or weekly cron `at` and a start grace
duration: the window opens at `at` and closes when the grace ends.

Device side: Python 3.9, standard library only (zoneinfo reads the system's tz database).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY = "(?:" + "|".join(DAYS) + ")"
_SPAN = f"{_DAY}(?:-{_DAY})?"
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
WINDOW_RE = re.compile(f"^(?:({_SPAN}(?:,{_SPAN})*) )?({_TIME})-({_TIME})$")
WINDOW_ALLOWED = ("[DAYS ]HH:MM-HH:MM (24-hour, the device's time zone, e.g. 02:00-04:30 or "
                  "'Sat,Sun 01:00-05:00'; may wrap past midnight; start and end differ)")
ZONE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$")


@dataclass(frozen=True)
class Window:
    start: int  # minutes after midnight
    end: int
    days: frozenset[int] = frozenset(range(7))   # the days it opens on (0: Monday)

    def contains(self, now: dt.datetime) -> bool:
        minute, day = now.hour * 60 + now.minute, now.weekday()
        if self.start <= self.end:
            return day in self.days and self.start <= minute < self.end
        return (minute >= self.start and day in self.days) or \
            (minute < self.end and (day - 1) % 7 in self.days)

    def next_open(self, now: dt.datetime) -> dt.datetime:
        """When the window opens next after `now` (which is outside it)."""
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        for ahead in range(8):
            day = midnight + dt.timedelta(days=ahead)
            opening = day.replace(hour=self.start // 60, minute=self.start % 60)
            if day.weekday() in self.days and opening > now:
                return opening
        raise ValueError("a window with no day")  # parse_window refuses an empty day set

    def text(self) -> str:
        times = (f"{self.start // 60:02d}:{self.start % 60:02d}-"
                 f"{self.end // 60:02d}:{self.end % 60:02d}")
        if len(self.days) == 7:
            return times
        return ",".join(DAYS[d] for d in sorted(self.days)) + " " + times


def parse_window(text: str) -> Window:
    """Raises ValueError for text WINDOW_RE does not match."""
    match = WINDOW_RE.match(text)
    if match is None:
        raise ValueError(text)
    days_text, start, end = match.groups()
    days: set[int] = set(range(7)) if days_text is None else set()
    for span in (days_text or "").split(",") if days_text else []:
        first, _, last = span.partition("-")
        a, b = DAYS.index(first), DAYS.index(last or first)
        days |= {(a + i) % 7 for i in range((b - a) % 7 + 1)}
    return Window(_minutes(start), _minutes(end), frozenset(days))


def _minutes(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def when(moment: dt.datetime, now: dt.datetime) -> str:
    """`HH:MM` today, else `Sat HH:MM`, with the zone's abbreviation."""
    zone = moment.strftime("%Z")
    day = "" if moment.date() == now.date() else f"{DAYS[moment.weekday()]} "
    return f"{day}{moment:%H:%M}" + (f" {zone}" if zone else "")


def closed(window: Window | None, what: str, now: dt.datetime) -> str | None:
    """None inside the window (or with none); else why the work waits, and until when."""
    if window is None or window.contains(now):
        return None
    return f"outside the {what} window {window.text()} until {when(window.next_open(now), now)}"
