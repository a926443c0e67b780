"""The on-device updater over an LTE-like link (issue 12): bytes on the wire against the
delta file, cuts, and transfer time at the link rate, side by side with a plain ostree pull.

A signed SAMPLE update pair whose change is N MiB of incompressible bytes (the delta file
is then N MiB: what crosses the link does not depend on what the bytes are) is published
as `deltas` publishes it (repo/, updates/REF/index.json{,.sig}, the delta file). Each row
is a fresh simulated device, installed with v1 and booted, that runs v1's own
/usr/bin/microshift-update (builder.device.updater_run.run_updater) or `ostree pull` of the ref
(Device.upgrade). 40 MiB is the size of the real-scale update of issue 11 (a 96 MB Hugo
executable and a 166 MB image layer change: a 40.2 MiB delta); throttled rows need root
(network namespaces) and use smaller changes so one row stays under a minute.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from builder.context import Context
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.device.boot import boot
from builder.device.commits import UpdatePair, build_sample_pair
from builder.device.health_server import ApiServer
from builder.device.netlink import netns_unavailable_reason
from builder.device.sysroot import Device, LinkOptions, release_deployments
from builder.device.updater_run import UpdateOptions, run_updater

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
SIM = {"retry_delay_seconds": 0, "timeout_seconds": 30}
# (label, delta MiB, link kbit/s or None, cuts)
ROWS = (("real-size, no cuts", 40, None, 0), ("real-size, 5 cuts", 40, None, 5),
        ("5 Mbit/s, 5 cuts", 8, 5000, 5), ("1 Mbit/s", 2, 1000, 0))
CAPPED_PULL = (2, 256 * 1024)  # (change MiB, cap B/s): the pull alone takes about 8 s


def _device(pair: UpdatePair, work: Path) -> Device:
    device = Device(work, Runner(), Progress(stream=open("/dev/null", "w")))  # noqa: SIM115
    device.init("edge")
    device.install(pair.repo, pair.ref, commit=pair.v1, gpg_key=pair.public_key)
    with ApiServer() as api:
        boot(device, api, {})
    return device


def _row(pair: UpdatePair, work: Path, rate: int | None, cuts: int, seed: int, *,
         pull: bool = True) -> dict[str, Any]:
    """The updater on a fresh device holding the from-commit; with `pull`, a plain
    `ostree pull` on another one, over the same link."""
    device = _device(pair, work / f"updater-{seed}")
    report, _ = run_updater(device, pair.repo, UpdateOptions(
        LinkOptions(rate_kbit=rate), cuts, seed, SIM))
    release_deployments(work / f"updater-{seed}", Runner())
    pull_bytes = pull_time_ratio = None
    if pull:
        pulled = _device(pair, work / f"pull-{seed}")
        transfer, _ = pulled.upgrade(pair.repo, LinkOptions(rate_kbit=rate))
        release_deployments(work / f"pull-{seed}", Runner())
        pull_bytes = transfer.body_bytes
        # Over a throttled link: seconds / (bytes on the wire / rate + latency), what
        # `device simulate --rate` reports for its plain pulls (no test checks it).
        pull_expected = transfer.expected_seconds()
        pull_time_ratio = transfer.seconds / pull_expected if pull_expected else None
    expected = report.expected_download_seconds()
    return {"delta_bytes": report.delta_bytes, "bytes_on_wire": report.bytes_on_wire,
            "ratio": report.ratio(), "cuts": report.interruptions,
            "duplicate_bytes": report.duplicate_delta_bytes,
            "download_seconds": report.download_seconds,
            "time_ratio": (report.download_seconds / expected
                           if expected and report.download_seconds else None),
            "pull_bytes": pull_bytes,
            "pull_ratio": pull_bytes / (report.delta_bytes or 1) if pull_bytes else None,
            "pull_time_ratio": pull_time_ratio}


def measure_pair(pair: UpdatePair, work: Path) -> dict[str, Any]:
    """The real-scale tier's update (bench/realscale.py): the updater without and with 5 cuts,
    and a plain ostree pull, each on a fresh device holding the from-commit; where network
    namespaces exist, also over a throttled LTE-like link (5 Mbit/s with 5 cuts, 1 Mbit/s),
    without the pull (at 1 Mbit/s it alone would take minutes)."""
    rows = {"no cuts": _row(pair, work / "ota-0", None, 0, 0),
            "5 cuts": _row(pair, work / "ota-5", None, 5, 5)}
    if netns_unavailable_reason(Runner()) is None:
        rows["5 Mbit/s, 5 cuts"] = _row(pair, work / "ota-5m", 5000, 5, 5, pull=False)
        rows["1 Mbit/s"] = _row(pair, work / "ota-1m", 1000, 0, 1, pull=False)
    return rows


def _capped_pull(pair: UpdatePair, work: Path, cap: int) -> dict[str, float]:
    """The updater's fallback (no delta file for the booted commit: here no index at all)
    with a cap, against a plain `ostree pull` of the same commits on another device."""
    site = work / "site/repo"
    shutil.copytree(pair.repo, site, symlinks=True)
    device = _device(pair, work / "capped")
    report, _ = run_updater(device, site, UpdateOptions(
        config={**SIM, "max_bytes_per_second": cap}))
    release_deployments(work / "capped", Runner())
    plain = _device(pair, work / "plain")
    transfer, _ = plain.upgrade(pair.repo, LinkOptions())
    release_deployments(work / "plain", Runner())
    if report.method != "pull" or not report.download_seconds:
        raise RuntimeError(f"the capped update did not pull: {report.log}")
    return {"pull_bytes": report.bytes_on_wire, "plain_pull_bytes": transfer.body_bytes,
            "seconds": report.download_seconds,
            "time_ratio": report.download_seconds / (report.bytes_on_wire / cap)}


def measure(rounds: int, out: Path) -> dict[str, Any]:
    throttle = netns_unavailable_reason(Runner()) is None
    results: dict[str, Any] = {"rounds": rounds, "rows": {}}
    with tempfile.TemporaryDirectory(prefix="bench-ota-", dir=out) as scratch:
        pairs: dict[int, UpdatePair] = {}

        def pair(mib: int) -> UpdatePair:
            if mib not in pairs:
                build = Path(scratch) / f"pair-{mib}"
                ctx = Context(build_dir=build, release_path=ROOT / "release.yaml",
                              progress=Progress(stream=open("/dev/null", "w")))  # noqa: SIM115
                pairs[mib] = build_sample_pair(ctx, build / "server/repo", mib * MIB)
            return pairs[mib]

        for number, (label, mib, rate, cuts) in enumerate(ROWS):
            if rate is not None and not throttle:
                continue
            runs = [_row(pair(mib), Path(scratch) / f"row-{number}", rate, cuts, seed)
                    for seed in range(rounds)]
            results["rows"][label] = _medians(runs)
        mib, cap = CAPPED_PULL
        results["capped_pull"] = {"cap": cap, **_medians(
            [_capped_pull(pair(mib), Path(scratch) / f"capped-{seed}", cap)
             for seed in range(rounds)])}
    return results


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: statistics.median(r[key] for r in runs)
            if all(r[key] is not None for r in runs) else None for key in runs[0]}


def report(result: dict[str, Any]) -> str:
    lines = [f"OTA updater vs ostree pull, medians of {result['rounds']} runs",
             "| row | delta MiB | on the wire / delta | cuts | bytes twice | download / "
             "(bytes / rate) | ostree pull / delta |", "|---|---|---|---|---|---|---|"]
    for label, row in result["rows"].items():
        lines.append(ota_row(label, row))
    timed = {label: row["pull_time_ratio"] for label, row in result["rows"].items()
             if row.get("pull_time_ratio")}
    if timed:
        lines += ["", "Plain ostree pull over the throttled link",
                  "| row | pull seconds / (bytes on the wire / rate + latency) |", "|---|---|"]
        lines += [f"| {label} | {ratio:.2f} |" for label, ratio in timed.items()]
    capped = result.get("capped_pull")
    if capped:
        lines += ["", f"Fallback ostree pull through the updater's relay, capped at "
                  f"{capped['cap']} B/s", "| relayed MiB | plain ostree pull MiB | "
                  "pull seconds / (relayed bytes / cap) |", "|---|---|---|",
                  f"| {capped['pull_bytes'] / MIB:.2f} | {capped['plain_pull_bytes'] / MIB:.2f}"
                  f" | {capped['time_ratio']:.3f} |"]
    return "\n".join(lines)


def ota_row(label: str, row: dict[str, Any]) -> str:
    time_ratio = f"{row['time_ratio']:.2f}" if row["time_ratio"] else "-"
    pull_ratio = f"{row['pull_ratio']:.2f}" if row["pull_ratio"] else "-"
    return (f"| {label} | {row['delta_bytes'] / MIB:.2f} | {row['ratio']:.4f} | "
            f"{row['cuts']:.0f} | {row['duplicate_bytes']:.0f} | {time_ratio} | {pull_ratio} |")
