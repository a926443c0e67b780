"""/etc/microshift/update.yaml: how the updater may use the link and when it may reboot.

Read strictly (an unknown key or a bad value is an error naming the key, and no update runs),
with the standard library and PyYAML only: this module runs on the device (Python 3.9).
builder.updater.update_model is the same document as a pydantic model, for the JSON Schema; a
differential property test holds the two to one meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder.core.schema import Fields, load_yaml
from builder.updater.fetch import Patience

CONFIG_PATH = Path("etc/microshift/update.yaml")
WINDOW_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]):([0-5][0-9])$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
URL_RE = re.compile(r"^https?://[^\s/]+(/\S*)?$")
# updates_url may also be a directory: a USB stick with the published updates/ on it.
UPDATES_URL_RE = re.compile(r"^(https?://[^\s/]+(/\S*)?|file:///\S*)$")
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 32
GIB = 1024 ** 3
LIMITS = {  # key: (default, minimum, maximum, allowed text)
    "max_bytes_per_second": (0, 0, 10 * GIB, "0 (no cap) or bytes per second"),
    "staging_max_bytes": (4 * GIB, 1024 * 1024, 1024 * GIB, "bytes, at least 1048576"),
    "retries": (10, 0, 1000, "0..1000 attempts after the first"),
    "retry_delay_seconds": (30, 0, 86400, "0..86400 seconds"),
    "timeout_seconds": (60, 1, 3600, "1..3600 seconds"),
    "low_speed_bytes_per_second": (1000, 0, 10 * GIB,
                                   "0 (only silence stalls) or bytes per second"),
    "run_deadline_seconds": (4 * 3600, 10, 23 * 3600, "10..82800 seconds"),
}


@dataclass(frozen=True)
class Window:
    """A daily time window in the device's local time; it may wrap past midnight."""

    start: int  # minutes after midnight
    end: int

    def contains(self, minute: int) -> bool:
        if self.start <= self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def text(self) -> str:
        return (f"{self.start // 60:02d}:{self.start % 60:02d}-"
                f"{self.end // 60:02d}:{self.end % 60:02d}")


@dataclass(frozen=True)
class UpdateConfig:
    remote: str = ""          # "": the remote of the booted deployment's origin
    updates_url: str = ""     # "": the remote's URL with its last segment replaced by updates
    max_bytes_per_second: int = 0
    staging_max_bytes: int = 4 * GIB
    retries: int = 10
    retry_delay_seconds: int = 30
    timeout_seconds: int = 60
    low_speed_bytes_per_second: int = 1000
    run_deadline_seconds: int = 4 * 3600
    reboot: bool = False
    maintenance_window: Window | None = None
    allow_downgrade: bool = False
    collector_url: str = ""   # where verdicts are POSTed ("": left in the outbox)
    labels: tuple[tuple[str, str], ...] = ()   # matched by rollout waves with labels

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def patience(self, deadline: float | None) -> Patience:
        """The bounds of every request (builder/updater/fetch.py). Under a bandwidth cap the
        low-speed bound is at most half the cap: the updater's own pacing is no stall."""
        low = self.low_speed_bytes_per_second
        if self.max_bytes_per_second:
            low = min(low, self.max_bytes_per_second // 2)
        return Patience(float(self.timeout_seconds), low, deadline)


def load_update_config(path: Path) -> UpdateConfig:
    """A missing file means every default; an empty one too."""
    if not path.exists():
        return UpdateConfig()
    data = load_yaml(path)
    return parse_update_config({} if data is None else data, str(path))


def parse_update_config(data: object, file: str) -> UpdateConfig:
    top = Fields(file, "", data)
    remote = top.get("remote", str, "")
    top.check("remote", remote, lambda r: r == "" or NAME_RE.match(r),
              "an ostree remote name (letters, digits, '.', '_', '-')")
    url = top.get("updates_url", str, "")
    top.check("updates_url", url, lambda u: u == "" or UPDATES_URL_RE.match(u),
              "an http://, https:// or file:/// URL without spaces")
    collector = top.get("collector_url", str, "")
    top.check("collector_url", collector, lambda u: u == "" or URL_RE.match(u),
              "an http:// or https:// URL without spaces")
    labels = _labels(top)
    numbers = {key: _number(top, key) for key in LIMITS}
    reboot = top.get("reboot", bool, False)
    window_text = top.get("maintenance_window", str, "")
    top.check("maintenance_window", window_text, lambda w: w == "" or WINDOW_RE.match(w),
              "HH:MM-HH:MM (24-hour local time, e.g. 02:00-04:30; may wrap past midnight)")
    window = parse_window(window_text) if window_text else None
    if window is not None and window.start == window.end:
        raise top.error("maintenance_window", f"{window_text!r} is empty; allowed: a window "
                        "whose start and end differ")
    downgrade = top.get("allow_downgrade", bool, False)
    top.close()
    return UpdateConfig(remote=remote, updates_url=url.rstrip("/") + "/" if url else "",
                        reboot=reboot, maintenance_window=window, allow_downgrade=downgrade,
                        collector_url=collector, labels=labels, **numbers)


def _labels(top: Fields) -> tuple[tuple[str, str], ...]:
    labels = top.get("labels", dict, {})
    allowed = (f"at most {MAX_LABELS} labels, names and values of letters, digits, '.', '_', "
               "'/', '-' (at most 63, starting with a letter or digit)")
    top.check("labels", labels, lambda m: len(m) <= MAX_LABELS and all(
        isinstance(k, str) and isinstance(v, str) and LABEL_RE.match(k) and LABEL_RE.match(v)
        for k, v in m.items()), allowed)
    return tuple(sorted(labels.items()))


def _number(top: Fields, key: str) -> int:
    default, low, high, allowed = LIMITS[key]
    value = top.get(key, int, default)
    return top.check(key, value, lambda v: low <= v <= high, f"{allowed} (at most {high})")


def parse_window(text: str) -> Window:
    match = WINDOW_RE.match(text)
    if match is None:
        raise ValueError(text)
    hours = tuple(int(g) for g in match.groups())
    return Window(hours[0] * 60 + hours[1], hours[2] * 60 + hours[3])
