"""Rollouts on the publishing side: the plan an admin writes, and the signed statement that
carries it (builder/updater/waves.py says what devices do with it).

Everything that reads, changes and signs the published statements (`publish`, the rollout
commands, the collector's automatic halt) does so holding one lock, SITE/.rollout.lock, so
an `advance` cannot undo a halt that landed a moment before, nor a publish either.

    --rollout-waves "site=lab,30%,100%"   waves, in order: a label selector (NAME=VALUE,
                                          several joined by '+') or a cumulative share;
                                          a last wave of 100% is added when missing
    --rollout-budget site=1 | site=25%    at most 1 device (or 25% of the group's devices
                                          the collector knows, rounded up, at least 1) per
                                          value of the label `site` updating at once
    --rollout-window "site=lab:apply=Sat,Sun 01:00-05:00;download=22:00-06:00;tz=UTC"
                                          (repeatable) the group's windows, which replace
                                          update.yaml's for the devices it selects
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from builder.core.bounded_json import BadDocument, Doc, parse
from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.publish.statement_signing import sign_timestamp
from builder.updater.freshness import TIMESTAMP, Timestamp, parse_timestamp
from builder.updater.index import CHECKSUM, INDEX, MAX_METADATA, UpdateRefused
from builder.updater.rollout_rules import LABEL_RE, MAX_ALLOWED, MAX_RE, Budget, GroupWindows
from builder.updater.update_config import known_zone
from builder.updater.waves import ID_RE, Rollout, Wave
from builder.updater.windows import WINDOW_ALLOWED, WINDOW_RE, ZONE_RE, parse_window

LOCK = ".rollout.lock"
PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")
DURATION = re.compile(r"^(\d+)([smhd]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class RolloutPlan:
    """What `publish --rollout-waves` (or `rollout start`) starts for a ref's new head."""

    waves: tuple[Wave, ...]
    rollout_id: str = ""   # "": one of its own for each head (a new draw of devices)
    budget: Budget | None = None     # its grants start empty: the collector fills them
    windows: tuple[GroupWindows, ...] = ()

    def start(self, ref: str, commit: str, now: int) -> Rollout:
        rollout_id = self.rollout_id or default_id(ref, commit)
        waves = (replace(self.waves[0], opened=now), *self.waves[1:])
        return Rollout(rollout_id, commit, "active", "", waves, self.budget, self.windows)


def default_id(ref: str, commit: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9._-]', '-', ref).strip('-.')[:40]}-{commit[:12]}"


def parse_waves(text: str, *, soak: str = "0", success: float = 100.0, halt: float = 0.0,
                option: str = "--rollout-waves") -> tuple[Wave, ...]:
    """Waves from "site=lab,30%,100%", each with the same soak and thresholds."""
    soak_seconds = parse_duration(soak, "--rollout-soak")
    for name, value in (("--rollout-success", success), ("--rollout-halt", halt)):
        if not 0 <= value <= 100:
            raise InputError("command line", name, f"{value:g} is not a percentage (0..100)")
    waves: list[Wave] = []
    last = 0.0
    for number, item in enumerate(part.strip() for part in text.split(",")):
        share = PERCENT.match(item)
        if share:
            percent = float(share.group(1))
            if not last < percent <= 100:
                raise InputError("command line", option, f"{item!r}: shares grow wave by wave "
                                 "(cumulative) and end at 100%")
            last = percent
            waves.append(Wave(f"wave{number + 1}-{percent:g}%", percent, (), soak_seconds,
                              success, halt))
            continue
        labels = [pair.partition("=") for pair in item.split("+")]
        if not item or not all(sep and LABEL_RE.match(k) and LABEL_RE.match(v)
                               for k, sep, v in labels):
            raise InputError("command line", option, f"{item!r} is neither a share (30%) "
                             "nor a label selector (site=lab, several joined by '+')")
        waves.append(Wave(item, None, tuple(sorted((k, v) for k, _, v in labels)),
                          soak_seconds, success, halt))
    if not waves or waves[-1].percent != 100:
        waves.append(Wave("everyone-100%", 100.0, (), soak_seconds, success, halt))
    return tuple(waves)


def parse_budget_option(text: str, option: str = "--rollout-budget") -> Budget:
    """A budget from "site=1" or "site=25%"."""
    label, sep, most = text.strip().partition("=")
    if not sep or not LABEL_RE.match(label) or not MAX_RE.match(most):
        raise InputError("command line", option, f"{text!r} is not LABEL=MAX; allowed: a "
                         f"label name, '=', then {MAX_ALLOWED}, e.g. site=1 or site=25%")
    return Budget(label, most if most.endswith("%") else int(most))


def parse_window_option(text: str, option: str = "--rollout-window") -> GroupWindows:
    """A group's windows from "site=lab:apply=Sat 01:00-05:00;download=...;tz=UTC"."""
    selector, sep, rest = text.partition(":")
    pairs = [pair.partition("=") for pair in selector.split("+")]
    if not sep or not all(s and LABEL_RE.match(k) and LABEL_RE.match(v) for k, s, v in pairs) \
            or pairs[0][0] in ("apply", "download", "tz"):
        raise InputError("command line", option, f"{text!r} does not start with a group "
                         "(NAME=VALUE, several joined by '+') and ':'")
    found: dict[str, str] = {}
    for part in (p.strip() for p in rest.split(";")):
        kind, _, value = part.partition("=")
        if kind not in ("apply", "download", "tz") or kind in found:
            raise InputError("command line", option, f"{part!r} in {text!r}: allowed: "
                             "apply=WINDOW, download=WINDOW, tz=ZONE, each once, joined by ';'")
        found[kind] = value.strip()
    for kind in ("apply", "download"):
        window = found.get(kind)
        if window is not None and (not WINDOW_RE.match(window) or
                                   parse_window(window).start == parse_window(window).end):
            raise InputError("command line", option, f"{kind}={window!r}: allowed: "
                             f"{WINDOW_ALLOWED}")
    zone = found.get("tz", "")
    if zone and not (ZONE_RE.match(zone) and known_zone(zone)):
        raise InputError("command line", option, f"tz={zone!r} is not a time zone of the tz "
                         "database (e.g. Europe/Madrid, UTC)")
    if "apply" not in found and "download" not in found:
        raise InputError("command line", option, f"{text!r} names no window; allowed: "
                         "apply=WINDOW and/or download=WINDOW")
    download, apply = (parse_window(found[k]) if k in found else None
                       for k in ("download", "apply"))
    return GroupWindows(tuple(sorted((k, v) for k, _, v in pairs)), download, apply, zone)


def parse_duration(text: str, option: str) -> int:
    match = DURATION.match(text.strip())
    if match is None:
        raise InputError("command line", option, f"{text!r} is not a duration; allowed: "
                         "seconds, or a number with s, m, h or d (e.g. 6h)")
    return int(match.group(1)) * UNITS[match.group(2)]


def check_id(rollout_id: str) -> str:
    if rollout_id and not ID_RE.match(rollout_id):
        raise InputError("command line", "--rollout-id", f"{rollout_id!r} is not allowed; "
                         "allowed: letters, digits, '.', '_', '-', at most 64")
    return rollout_id


@contextlib.contextmanager
def statements_lock(site: Path) -> Iterator[None]:
    """Held while a published statement is read, changed, signed and written."""
    site.mkdir(parents=True, exist_ok=True)
    with (site / LOCK).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def read_statement(ref_dir: Path) -> Timestamp | None:
    """The published statement of a ref (None when there is none)."""
    try:
        data = (ref_dir / TIMESTAMP).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BuildError(f"{ref_dir / TIMESTAMP}: {exc.strerror or exc}") from exc
    try:
        return parse_timestamp(data, str(ref_dir / TIMESTAMP))
    except UpdateRefused as exc:
        raise BuildError(str(exc), hint="publish again with --gpg-key") from exc


def index_head(ref_dir: Path) -> str:
    """The commit an index (REF_DIR/index.json) offers."""
    path = ref_dir / INDEX
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BuildError(f"{path}: not a readable update index ({exc.strerror})") from exc
    try:
        head: str = Doc(parse(data, str(path), limit=MAX_METADATA), str(path)).text(
            "to_commit", pattern=CHECKSUM, allowed="a commit checksum")
    except BadDocument as exc:
        raise BuildError(str(exc)) from None
    return head


def resign(runner: Runner, key: SigningKey, ref_dir: Path, ref: str, *, validity: int,
           rollout: Rollout | None) -> Timestamp:
    """Sign REF_DIR's statement again with `rollout` (the caller holds the lock), issued
    after the one it replaces."""
    previous = read_statement(ref_dir)
    return sign_timestamp(runner, key, ref_dir, ref, validity, rollout=rollout,
                          after=previous.issued if previous else 0)


def local_site(target: str) -> Path | None:
    """The directory a publish target is, when it is one on this machine."""
    if target.startswith(("s3://", "rsync://")) or re.match(r"^[^/]*:", target):
        return None
    return Path(target)
