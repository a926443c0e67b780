"""`python -m bench [build] [--rounds N] [--out DIR]` (what `nox -s bench` runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import build_times, publish, update_size

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("build", "update", "publish")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("which", nargs="*",
                        help="benchmarks to run: build, update, publish (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    parser.add_argument("--release", type=Path, default=ROOT / "release.yaml")
    args = parser.parse_args()
    which = set(args.which or BENCHMARKS)
    if which - set(BENCHMARKS):
        parser.error(f"unknown benchmark; choose from {', '.join(BENCHMARKS)}")
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
    return 0


raise SystemExit(main())
