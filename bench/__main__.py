"""`python -m bench [build] [update] [publish] [ota] [arches] [realscale] [signals] [--rounds N]
[--out DIR]`.

`nox -s bench` runs it.
`realscale` (issue 11) is heavy (about half an hour on 2 cores) and runs only when named:
`python -m bench realscale [--series hugo-0.163|hugo-0.152] [--releases N]`.
`large-object` (issue 34) runs only when named: one 96 MB executable's delta from the
builder's generator, ostree's bsdiff and xdelta3 -9 side by side (`--rounds 3`: ~15 minutes).
`matrix` (issue 34) runs only when named: every image profile of the real-scale series for
both architectures, its 24 update paths and 8 from scratch in one job, cold and with one
image changed (composes: hours the first time, cached after; deltas: minutes).
`signals` (issue 32) kills each long command at random moments ROUNDS times per signal
(`python -m bench signals --rounds 20`: about 2 hours) and runs only when named;
`--only NAME` (repeatable) kills only that command, e.g. `--only "composer compose"`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import (
    arches,
    build_times,
    large_object,
    matrix,
    ota,
    publish,
    realscale,
    signals,
    update_size,
)
from bench.fixture import SERIES

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("build", "update", "publish", "ota", "arches", "realscale", "signals",
              "large-object", "matrix")
DEFAULT = ("build", "update", "publish", "ota", "arches")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("which", nargs="*",
                        help="benchmarks: build, update, publish, ota, arches, realscale, "
                             "signals, large-object, matrix "
                             "(default: build update publish ota arches)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    parser.add_argument("--release", type=Path, default=ROOT / "release.yaml")
    parser.add_argument("--series", choices=sorted(SERIES), default="hugo-0.163",
                        help="realscale: the release series (bench/fixture.py)")
    parser.add_argument("--releases", type=int, default=None,
                        help="realscale: compose the last N releases of the series (default: "
                             "all; 2 is the adjacent pair alone)")
    parser.add_argument("--only", action="append", choices=signals.NAMES, default=[],
                        metavar="NAME", help="signals: only this command (repeatable): "
                                             f"{', '.join(signals.NAMES)}")
    args = parser.parse_args()
    which = set(args.which or DEFAULT)
    if which - set(BENCHMARKS):
        parser.error(f"unknown benchmark; choose from {', '.join(BENCHMARKS)}")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if "build" in which:
        result = build_times.measure(args.rounds, args.release.resolve())
        (args.out / "build-times.json").write_text(json.dumps(result, indent=2) + "\n")
        print(build_times.report(result))
    if "update" in which:
        result = update_size.measure(max(1, args.rounds // 2), args.out / "cache")
        (args.out / "update-size.json").write_text(json.dumps(result, indent=2) + "\n")
        print(update_size.report(result))
    if "publish" in which:
        result = publish.measure(max(1, args.rounds // 2), args.out / "cache")
        (args.out / "publish.json").write_text(json.dumps(result, indent=2) + "\n")
        print(publish.report(result))
    if "ota" in which:
        result = ota.measure(max(1, args.rounds // 2), args.out)
        (args.out / "ota.json").write_text(json.dumps(result, indent=2) + "\n")
        print(ota.report(result))
    if "signals" in which:
        result = signals.measure(args.rounds, args.release.resolve(), args.out,
                                 args.only)
        (args.out / "signals.json").write_text(json.dumps(result, indent=2) + "\n")
        print(signals.report(result))
    if "arches" in which:
        result = arches.measure(max(1, args.rounds // 2), args.release.resolve())
        (args.out / "arches.json").write_text(json.dumps(result, indent=2) + "\n")
        print(arches.report(result))
    checked = _deltas(which, args)
    if checked is not None and "realscale" not in which:
        return 0 if checked else 1
    if "realscale" in which:
        series = SERIES[args.series]
        releases = min(args.releases or len(series.payloads), len(series.payloads))
        if releases < 2:
            parser.error("--releases must be at least 2")
        result = realscale.measure(args.series, releases, args.out)
        name = f"realscale-{args.series}-{releases}.json"
        (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
        print(realscale.report(result))
        return 0 if all(result["checks"].values()) else 1
    return 0


def _deltas(which: set[str], args: argparse.Namespace) -> bool | None:
    """The delta generator's benchmarks (issue 34): whether their checks passed, None when
    none ran."""
    checked = None
    if "large-object" in which:
        result = large_object.measure(args.rounds, args.out)
        (args.out / "large-object.json").write_text(json.dumps(result, indent=2) + "\n")
        print(large_object.report(result))
        checked = all(result["checks"].values())
    if "matrix" in which:
        result = matrix.measure(args.out)
        (args.out / "matrix.json").write_text(json.dumps(result, indent=2) + "\n")
        print(matrix.report(result))
        checked = bool(checked is not False and all(result["checks"].values()))
    return checked


raise SystemExit(main())
