"""`components run`: run an image tree's component plugins the way MicroShift does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from builder.context import Context

YAML_SUFFIXES = (".yaml", ".yml")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "components", help="run the components.d plugins of an image tree",
        description="The MicroShift side of the components.d plugin calling convention.")
    actions = parser.add_subparsers(dest="components_action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run every plugin under ROOT and print the combined manifests",
        description="Read ROOT/etc/microshift/config.yaml (or --config), map it to the "
                    "MICROSHIFT_* variables, check each plugin's api-version, run the "
                    "plugins of ROOT/usr/lib/microshift/components.d in alphabetical order "
                    "and print one multi-document YAML stream of all their manifests. "
                    "Plugins read their own files under ROOT (MICROSHIFT_SYSROOT) but check "
                    "the running system (network interfaces, LVM).")
    run.add_argument("--root", type=Path, required=True,
                     help="the image tree: an extracted set of RPMs or an ostree checkout")
    run.add_argument("--config", type=Path,
                     help="config.yaml to use (default: ROOT/etc/microshift/config.yaml; "
                          "defaults apply when that does not exist)")
    run.add_argument("--out", type=Path,
                     help="write here instead of stdout: a path ending in .yaml or .yml gets "
                          "the combined stream, any other path becomes a kustomize directory "
                          "(kustomization.yaml + one file per plugin)")
    run.add_argument("--timeout", type=_seconds, default=60.0,
                     help="seconds each plugin may take (default: 60)")
    run.set_defaults(func=cmd_components_run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: 0 < S <= 3600")
    return value


def cmd_components_run(ctx: Context, args: argparse.Namespace) -> int:
    from builder.components.loader import (
        render_stream,
        run_components,
        write_kustomize_dir,
    )
    from builder.core.files import write_atomic

    with ctx.progress.step(f"components run --root {args.root}"):
        outputs = run_components(args.root, config_path=args.config, runner=ctx.runner,
                                 progress=ctx.progress, timeout=args.timeout)
        count = sum(len(output.documents) for output in outputs)
        # Nothing is printed or written until every plugin has succeeded.
        if args.out is None:
            sys.stdout.write(render_stream(outputs))
            sys.stdout.flush()
        elif args.out.suffix in YAML_SUFFIXES:
            write_atomic(args.out, render_stream(outputs))
            ctx.progress.wrote(str(args.out), args.out.stat().st_size)
        else:
            write_kustomize_dir(args.out, outputs)
            ctx.progress.info(f"wrote kustomize directory {args.out}")
        ctx.progress.info(f"{count} objects from {len(outputs)} component plugins")
    return 0
