"""Thin command-line front end: `python -m builder COMMAND ...`.

Each command lives in its own module exposing `register(subparsers)`; the module sets
`func` on its parser to a callable taking (Context, argparse.Namespace) -> int.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.progress import Progress

COMMAND_MODULES = (
    "builder.commands.packaging",
    "builder.commands.pipeline",
    "builder.commands.composer",
    "builder.commands.blueprint",
    "builder.commands.compose",
    "builder.commands.kickstart",
    "builder.commands.installer",
    "builder.commands.device",
    "builder.commands.components",
    "builder.commands.publishing",
    "builder.commands.ci",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m builder",
        description="Build MicroShift RPMs, blueprints, ostree commits and installer media.")
    parser.add_argument("--debug", action="store_true",
                        help="log every command and show tracebacks")
    parser.add_argument("--json", action="store_true",
                        help="progress as JSON lines on stderr (for CI)")
    parser.add_argument("--release", type=Path, default=Path("release.yaml"),
                        help="release definition (default: ./release.yaml)")
    parser.add_argument("--arch", help="build only this of the release's architectures "
                                       "(default: all; ostree commits: the first)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    # The global options are accepted after the command too (`nox -s build-image -- --release
    # F` appends them there); SUPPRESS keeps the value given before the command otherwise.
    for command in sub.choices.values():
        _accept_global_options(command)
    return parser


def _accept_global_options(parser: argparse.ArgumentParser) -> None:
    known = {opt for action in parser._actions for opt in action.option_strings}
    if "--release" not in known:
        parser.add_argument("--release", type=Path, default=argparse.SUPPRESS,
                            help="release definition (default: ./release.yaml)")
    if "--arch" not in known:
        parser.add_argument("--arch", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for flag in ("--debug", "--json"):
        if flag not in known:
            parser.add_argument(flag, action="store_true", default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)
    for action in parser._actions:  # nested commands (composer, device, components)
        if isinstance(action, argparse._SubParsersAction):
            for nested in action.choices.values():
                _accept_global_options(nested)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(name)s: %(message)s")
    ctx = Context(build_dir=getattr(args, "build_dir", Path("build")).resolve(),
                  release_path=args.release.resolve(),
                  progress=Progress(json_mode=args.json), arch=args.arch)
    try:
        return int(args.func(ctx, args))
    except BuildError as exc:
        if args.debug:
            raise
        if args.json:  # CI parses stderr as JSON lines: the error is one more event
            print(json.dumps({"event": "error", "message": exc.message, "hint": exc.hint,
                              "exit_code": exc.exit_code}, sort_keys=True), file=sys.stderr)
        else:
            print(f"error: {exc.message}", file=sys.stderr)
            if exc.hint:
                print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
