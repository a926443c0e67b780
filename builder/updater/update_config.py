"""/etc/microshift/update.yaml: how the updater may use the link and when it may reboot.

Read strictly (an unknown key or a bad value is an error naming the key, and no update runs),
with the standard library and PyYAML only: this module runs on the device (Python 3.9).
builder.updater.update_model is the same document as a pydantic model, for the JSON Schema; a
differential property test holds the two to one meaning.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from builder.core.schema import Fields, load_yaml
from builder.updater.fetch import Patience
from builder.updater.windows import (
    WINDOW_ALLOWED,
    WINDOW_RE,
    ZONE_RE,
    Window,
    parse_window,
)

__all__ = ["WINDOW_RE", "UpdateConfig", "Window", "load_update_config", "parse_update_config",
           "parse_window"]
WINDOWS = ("maintenance_window", "download_window", "apply_window")

CONFIG_PATH = Path("etc/microshift/update.yaml")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
URL_RE = re.compile(r"^https?://[^\s/]+(/\S*)?$")
# updates_url may also be a directory: a USB stick with the published updates/ on it.
UPDATES_URL_RE = re.compile(r"^(https?://[^\s/]+(/\S*)?|file:///\S*)$")
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 32
MODES = ("ostree", "image")
IMAGE_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
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
    maintenance_window: Window | None = None   # reboots only inside it
    download_window: Window | None = None      # delta files and pulls only inside it
    apply_window: Window | None = None         # staging and reboots only inside it
    time_zone: str = ""       # the windows' zone ("": the device's local time)
    allow_downgrade: bool = False
    collector_url: str = ""   # where verdicts are POSTed ("": left in the outbox)
    labels: tuple[tuple[str, str], ...] = ()   # matched by rollout waves with labels
    mode: str = "ostree"      # "image": a bootc device, updated by image (image_run.py)
    image_ref: str = ""       # image mode: the updates/REF/ its signed index is under
    image_registry_url: str = ""   # image mode without a delta: "" is https://REGISTRY

    def now(self) -> dt.datetime:
        """The time the windows are read in."""
        if self.time_zone:
            from zoneinfo import ZoneInfo
            return dt.datetime.now(ZoneInfo(self.time_zone))
        return dt.datetime.now().astimezone()

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
    maintenance, download, apply = (_window(top, key) for key in WINDOWS)
    zone = top.get("time_zone", str, "")
    top.check("time_zone", zone, lambda z: z == "" or (ZONE_RE.match(z) and known_zone(z)),
              "a time zone of the tz database (e.g. Europe/Madrid, UTC), or empty for the "
              "device's local time")
    downgrade = top.get("allow_downgrade", bool, False)
    mode = top.check("mode", top.get("mode", str, "ostree"), lambda m: m in MODES,
                     "ostree or image")
    image_ref = top.get("image_ref", str, "")
    top.check("image_ref", image_ref, lambda r: r == "" or IMAGE_REF_RE.match(r),
              "the ref of the image's updates (letters, digits, '.', '_', '-', '/')")
    registry = top.get("image_registry_url", str, "")
    top.check("image_registry_url", registry, lambda u: u == "" or URL_RE.match(u),
              "an http:// or https:// URL without spaces (a registry or its mirror)")
    if mode == "image" and not (image_ref and url):
        raise top.error("mode", "image needs image_ref and updates_url; allowed: both set")
    top.close()
    return UpdateConfig(remote=remote, updates_url=url.rstrip("/") + "/" if url else "",
                        reboot=reboot, allow_downgrade=downgrade, time_zone=zone,
                        maintenance_window=maintenance, download_window=download,
                        apply_window=apply, collector_url=collector, labels=labels,
                        mode=mode, image_ref=image_ref,
                        image_registry_url=registry.rstrip("/"), **numbers)


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


def _window(top: Fields, key: str) -> Window | None:
    text = top.get(key, str, "")
    top.check(key, text, lambda w: w == "" or WINDOW_RE.match(w), WINDOW_ALLOWED)
    window = parse_window(text) if text else None
    if window is not None and window.start == window.end:
        raise top.error(key, f"{text!r} is empty; allowed: a window whose start and end "
                             "differ")
    return window


def known_zone(name: str) -> bool:
    """Whether the system's tz database (or the tzdata package) has the zone."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True
