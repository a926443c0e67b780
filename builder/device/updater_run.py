"""`device upgrade` with the shipped updater: run the booted deployment's microshift-update
inside the simulated device, against the published repository served over HTTP.

The server lays the repository out as `publish` does (/repo/ and /updates/REF/), so the
updater finds the signed index beside the repository on its own. The link can be throttled
(tbf between namespaces, builder.device.netlink) and cut at random offsets of the delta
file; the report counts what crossed it (every response body the server sent, and the
Ethernet frames on the veth when throttled) against the size of the delta file.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from builder.core.errors import BuildError
from builder.core.runner import find_tool
from builder.device.boot import script_env
from builder.device.grubenv import set_upgrade_counter
from builder.device.netlink import SERVER_ADDR, ThrottledLink
from builder.device.repo_server import RepoServer, ServeStats
from builder.device.sysroot import REMOTE, Deployment, Device, LinkOptions, max_boot_attempts

UPDATER = "usr/bin/microshift-update"
UNIT = "usr/lib/systemd/system/microshift-update.service"
CONFIG = "etc/microshift/update.yaml"
STATUS = "var/lib/microshift-update/status.json"
IMAGE_DIGESTS = "var/lib/microshift-update/image-digests.json"


@dataclass(frozen=True)
class UpdateOptions:
    link: LinkOptions = field(default_factory=LinkOptions)
    interruptions: int = 0          # cut the link this many times inside the delta file
    seed: int = 0                   # where the cuts fall
    config: dict[str, Any] = field(default_factory=dict)  # update.yaml, as an admin sets it
    # (path pattern, behaviour, seconds between bytes): the server turns hostile there
    # (builder/device/repo_server.py `misbehave`)
    hostile: tuple[tuple[str, str, float], ...] = ()
    # The device's clock for this run, seconds since the epoch (None: the real one). Set
    # with libfaketime's `faketime`, which the updater and every tool it starts see alike.
    clock: int | None = None


@dataclass(frozen=True)
class UpdateReport:
    method: str | None              # "delta-file" or "pull" (None: nothing to update)
    exit_code: int
    state: str
    bytes_on_wire: int              # every response body the server sent
    delta_bytes: int | None
    metadata_bytes: int
    duplicate_delta_bytes: int      # delta bytes sent more than once
    interruptions: int              # cuts the link made
    resumed: int                    # cuts the updater resumed after
    requests: int
    seconds: float
    download_seconds: float | None
    wire_frame_bytes: int | None    # Ethernet frames on the throttled link
    rate_kbit: int | None
    target: str | None
    log: tuple[str, ...] = ()
    layer_bytes: int = 0            # image mode without a delta: the layers pulled
    received: int = 0               # what the updater itself counted, from any server

    def ratio(self) -> float | None:
        return self.bytes_on_wire / self.delta_bytes if self.delta_bytes else None

    def expected_download_seconds(self) -> float | None:
        if self.rate_kbit is None or not self.delta_bytes:
            return None
        return self.delta_bytes * 8 / (self.rate_kbit * 1000)

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "log"},
                "ratio": self.ratio(), "expected_download_seconds":
                self.expected_download_seconds()}

    def text(self) -> str:
        line = (f"{self.method or 'no update'}: {self.bytes_on_wire} bytes served in "
                f"{self.requests} requests for a {self.delta_bytes or 0}-byte delta file")
        if self.ratio() is not None:
            line += f" ({self.ratio():.3f}x)"
        line += (f", {self.interruptions} cuts, {self.duplicate_delta_bytes} bytes sent twice, "
                 f"{self.seconds:.2f}s")
        expected = self.expected_download_seconds()
        if expected and self.download_seconds:
            line += (f"; download {self.download_seconds:.2f}s at {self.rate_kbit} kbit/s, "
                     f"{self.download_seconds / expected:.2f}x bytes/rate")
        return line


class UpdateFailed(BuildError):
    def __init__(self, message: str, report: UpdateReport) -> None:
        super().__init__(message, hint="the device keeps its deployments")
        self.report = report


def updates_dir(repo: Path) -> Path | None:
    """updates/ beside a published repo, or DIR/deltas/ of a build directory's repo."""
    for candidate in (repo.parent / "updates", repo.parent.parent / "deltas"):
        if candidate.is_dir():
            return candidate
    return None


def booted_root(device: Device) -> Path:
    root = device.state_dir / "root"
    if not (root / "proc/cmdline").is_file():
        raise BuildError(f"device {device.sysroot} has not been booted",
                         hint="run `device boot` once: the updater runs in the booted system")
    return root



def run_updater(device: Device, repo: Path, options: UpdateOptions
                ) -> tuple[UpdateReport, Deployment]:
    """Run the booted deployment's microshift-update once, as its unit would."""
    root = booted_root(device)
    if not (root / UPDATER).is_file():
        raise BuildError(f"the booted deployment has no /{UPDATER}",
                         hint="compose the image with microshift-update, or use "
                              "`device upgrade --method pull`")
    before = device.deployments()
    _write_config(root, options.config)
    with ExitStack() as stack:
        throttled: ThrottledLink | None = None
        prefix: list[str] = []
        if options.link.rate_kbit is not None:
            throttled = stack.enter_context(ThrottledLink(device.runner, options.link.rate_kbit))
            prefix = throttled.device_argv([])
            server = RepoServer(repo, SERVER_ADDR, 8080, latency=options.link.latency,
                                updates=updates_dir(repo) or repo / ".no-updates",
                                make_server=throttled.make_in_server_ns)
        else:
            server = RepoServer(repo, latency=options.link.latency,
                                updates=updates_dir(repo) or repo / ".no-updates")
        stack.enter_context(server)
        if options.config.get("mode") == "image":
            # An image-mode device has no ostree remote to find updates/ beside.
            base = server.url.rstrip("/").rsplit("/", 1)[0]
            _write_config(root, {"updates_url": f"{base}/updates/"})
        device.runner.run(["ostree", f"--repo={device.repo.path}", "config", "set",
                           f'remote "{REMOTE}".url', server.url])
        server.cut_delta_at(_cut_points(device, root, repo, options))
        for pattern, how, interval in options.hostile:
            server.misbehave(pattern, how, interval)
        wire0 = throttled.server_tx_bytes() if throttled else 0
        if options.clock is not None:
            prefix = [*prefix, find_tool("faketime") or "faketime", f"@{options.clock}"]
        report = _run(device, root, prefix, server)
        wire = throttled.server_tx_bytes() - wire0 if throttled else None
    report = _with_link(report, wire, options.link.rate_kbit if throttled else None)
    for line in report.log:
        device.progress.info(f"device: {line}")
    if report.exit_code != 0:
        status = _status(root)
        raise UpdateFailed(f"microshift-update failed (exit {report.exit_code}): "
                           f"{status.get('detail', '')}", report)
    after = device.deployments()
    if after and (not before or after[0].id != before[0].id):
        attempts = max_boot_attempts(after[0].path)
        set_upgrade_counter(device.grubenv, attempts)
        device.progress.info(f"greenboot: boot_counter={attempts}, boot_success=0 "
                             f"({after[0].version} gets {attempts} boots to prove itself)")
    return report, after[0]


def _write_config(root: Path, values: dict[str, Any]) -> None:
    """Set keys in the booted deployment's /etc/microshift/update.yaml, as an admin would."""
    path = root / CONFIG
    current = yaml.safe_load(path.read_text()) if path.is_file() else None
    merged = {**(current or {}), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(merged, sort_keys=True))


def _cut_points(device: Device, root: Path, repo: Path, options: UpdateOptions) -> list[int]:
    """K distinct offsets inside the delta file from the booted commit or image (seeded)."""
    if options.interruptions <= 0:
        return []
    updates = updates_dir(repo)
    cmdline = (root / "proc/cmdline").read_text()
    booted = Path(cmdline.split("ostree=", 1)[1].split()[0]).name.split(".")[0]
    image = options.config.get("mode") == "image"
    if image:
        booted = _signed_image(device, root, booted)
    for index in sorted(updates.rglob("index.json")) if updates else []:
        document = json.loads(index.read_text())
        entries = (document.get("image") or {}).get("deltas", []) if image else \
            document.get("files", [])
        for entry in entries:
            source = entry.get("from_manifest" if image else "from_commit")
            if source == booted and entry["bytes"] > options.interruptions:
                rng = random.Random(options.seed)
                return sorted(rng.sample(range(1, entry["bytes"]), options.interruptions))
    raise BuildError(f"--interruptions needs a delta file from the booted "
                     f"{'image' if image else 'commit'} {booted[:19]} in the published "
                     "updates/", hint="run `python -m builder deltas` after composing the "
                                      "new commit")


def _signed_image(device: Device, root: Path, commit: str) -> str:
    """The signed manifest digest the booted image deployment was made from: bootc records
    the layout's, which the updater maps back when it wrote that layout itself."""
    local = device.repo.metadata(commit, "ostree.manifest-digest") or ""
    try:
        known = json.loads((root / IMAGE_DIGESTS).read_text())
    except (OSError, ValueError):
        known = {}
    return str(known.get(local, local)) if isinstance(known, dict) else local


def _run(device: Device, root: Path, prefix: list[str], server: RepoServer) -> UpdateReport:
    with tempfile.TemporaryDirectory(prefix="device-update-") as scratch:
        report_file = Path(scratch) / "report.json"
        argv = [*prefix, str(root / UPDATER), "--root", str(root), "run", "--report",
                str(report_file)]
        started = time.monotonic()
        proc = device.runner.run(argv, env=script_env(device, root), check=False)
        seconds = time.monotonic() - started
        data = json.loads(report_file.read_text()) if report_file.is_file() else {}
    stats: ServeStats = server.stats
    log = tuple(line.removeprefix("microshift-update: ") for line in
                proc.stderr.decode(errors="replace").splitlines() if line.strip())
    return UpdateReport(
        method=data.get("method"), exit_code=proc.returncode, state=data.get("state", "?"),
        bytes_on_wire=stats.body_bytes, delta_bytes=data.get("delta_bytes"),
        metadata_bytes=data.get("metadata_bytes", 0),
        duplicate_delta_bytes=stats.duplicate_delta_bytes(),
        interruptions=stats.cut_transfers, resumed=data.get("interruptions", 0),
        requests=stats.requests, seconds=round(seconds, 3),
        download_seconds=data.get("download_seconds"), wire_frame_bytes=None,
        rate_kbit=None, target=data.get("target"), log=log,
        layer_bytes=data.get("layer_bytes", 0), received=data.get("bytes_received", 0))


def _with_link(report: UpdateReport, wire: int | None, rate_kbit: int | None) -> UpdateReport:
    return replace(report, wire_frame_bytes=wire, rate_kbit=rate_kbit)


def _status(root: Path) -> dict[str, Any]:
    path = root / STATUS
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
