"""Thin command-line front end: `python -m builder COMMAND ...`.

Each command lives in its own module exposing `register(subparsers)`; the module sets
`func` on its parser to a callable taking (Context, argparse.Namespace) -> int.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from builder import __version__
from builder.context import Context
from builder.core.buildlock import build_dir_lock
from builder.core.children import stop_gpg_agents
from builder.core.diskspace import no_space_error
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.core.reaper import Reaper

PROG = "microshift-builder"

COMMAND_MODULES = (
    "builder.commands.packaging",
    "builder.commands.baseos",
    "builder.commands.pipeline",
    "builder.commands.composer",
    "builder.commands.blueprint",
    "builder.commands.compose",
    "builder.commands.bootc",
    "builder.commands.installer",
    "builder.commands.disk",
    "builder.commands.device",
    "builder.commands.components",
    "builder.commands.publishing",
    "builder.commands.rollout",
    "builder.commands.ci",
    "builder.commands.schemas",
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
    parser.add_argument("--wait", action="store_true",
                        help="when another run holds the build directory, wait for it "
                             "instead of failing")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
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
    for flag in ("--debug", "--json", "--wait"):
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
    if args.json:  # CI records which tool made the artifacts
        ctx.progress.info(f"{PROG} {__version__}", version=__version__)
    started = time.time()
    build_dir = ctx.build_dir if hasattr(args, "build_dir") else None
    homes = [home for home in (getattr(args, "gpg_homedir", None),) if home is not None]
    # Stops the agents this run leaves even if the run is killed with SIGKILL.
    reaper = Reaper(build_dir, homes, started)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with _build_dir_held(ctx, args, sys.argv[1:] if argv is None else argv):
            return int(args.func(ctx, args))
    except (BuildError, OSError) as exc:
        error = no_space_error(exc, ctx.build_dir, ctx.progress.failed_at or args.command)
        if error is not None:
            error.__cause__ = exc
            return _report(error, args)
        if isinstance(exc, BuildError):
            return _report(exc, args)
        raise
    except Terminated:
        print("terminated (SIGTERM): the run stopped; a rerun resumes it", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        # Failed or not, no gpg-agent this run started outlives it.
        stop_gpg_agents(ctx.runner, build_dir, homes, started)
        reaper.close()


class Terminated(BaseException):
    """SIGTERM (a cancelled or timed-out CI job): unwinds like Ctrl-C, so every `finally`
    runs: children are killed, temporary places removed, agents stopped, the lock released."""


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one unwinding, however many signals
    raise Terminated


@contextlib.contextmanager
def _build_dir_held(ctx: Context, args: argparse.Namespace,
                    words: list[str]) -> Iterator[None]:
    """Every command that writes into a build directory holds its lock for the whole run."""
    if not hasattr(args, "build_dir"):
        yield
        return
    command = shlex.join(["python", "-m", "builder", *words])
    def stop_left_agents() -> None:
        # A run killed with SIGKILL could stop nothing: its successor does, and says so.
        for agent in stop_gpg_agents(ctx.runner, ctx.build_dir, [], time.time()):
            ctx.progress.info(f"stopped gpg-agent pid {agent.pid} ({agent.homedir}) that the "
                              "killed run left")

    with build_dir_lock(ctx.build_dir, command, ctx.progress, wait=args.wait,
                        on_takeover=stop_left_agents):
        yield


def _report(exc: BuildError, args: argparse.Namespace) -> int:
    if args.debug:  # the traceback too, but the exit status stays the error's
        traceback.print_exception(exc, file=sys.stderr)
    if args.json:  # CI parses stderr as JSON lines: the error is one more event
        print(json.dumps({"event": "error", "message": exc.message, "hint": exc.hint,
                          "exit_code": exc.exit_code}, sort_keys=True), file=sys.stderr)
    else:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
    return exc.exit_code
