"""`rollout`: a release reaching the fleet in waves (builder/rollout/, README "Fleet
rollouts"): start, status, advance, halt, resume; serve (the collector devices report to),
collect (verdict files from sites with no link), enroll (pin a device's key ahead) and
devices (the fleet's inventory)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.commands.options import add_rollout_options, add_signing_options, rollout_plan
from builder.context import Context
from builder.core.errors import InputError

PEM_LIMIT = 8192

if TYPE_CHECKING:
    from builder.rollout.admin import Signer, Site
    from builder.rollout.collector import Limits
    from builder.rollout.store import Store


def register(sub: Any) -> None:
    rollout = sub.add_parser("rollout", help="fleet rollouts in waves: start, status, "
                                             "advance, halt, resume, serve the collector")
    actions = rollout.add_subparsers(dest="rollout_action", required=True, metavar="ACTION")

    def action(name: str, text: str, *, signs: bool = False, db: bool = True,
               ref: bool = True, site: bool = True) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=text, description=text)
        if site:
            parser.add_argument("--site", type=Path, required=True, metavar="DIR",
                                help="the published directory (publish --to DIR, or the "
                                     "copy given to publish --rollouts-from)")
        if db:
            parser.add_argument("--db", type=Path, default=Path("rollout.db"),
                                help="the collector's SQLite database (default ./rollout.db; "
                                     "keep it out of the published directory)")
        if ref:
            parser.add_argument("--ref", help="the ref (default: the only one with a rollout)")
        if signs:
            add_signing_options(parser)
        made: argparse.ArgumentParser = parser
        return made

    start = action("start", "start a rollout of the published head of --ref", signs=True,
                   db=False)
    add_rollout_options(start, required=True)
    start.set_defaults(func=cmd_start)
    _status_options(action("status", "per wave: devices offered, downloaded, staged, green, "
                                     "rolled back, silent; the budget's groups; held devices"))
    advance = action("advance", "open the next wave, when the open one met its success "
                                "threshold and soak time", signs=True)
    advance.add_argument("--force", action="store_true", help="open it anyway")
    advance.set_defaults(func=cmd_advance)
    halt = action("halt", "stop the rollout: no further device stages it", signs=True, db=False)
    halt.add_argument("--reason", default="halted by the admin", help="shown on the devices")
    halt.set_defaults(func=cmd_halt)
    action("resume", "go on with a halted rollout (with --db, budget slots are granted too)",
           signs=True).set_defaults(func=cmd_resume)
    serve = action("serve", "the collector devices POST their verdicts to", signs=True,
                   ref=False)
    _serve_options(serve)
    collect = action("collect", "take verdict files (a site's outbox on a USB stick)",
                     signs=True, ref=False)
    collect.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                         help="verdict files, or directories of them")
    collect.add_argument("--enrolled-only", action="store_true",
                         help="take verdicts of enrolled devices only")
    _limit_options(collect)
    collect.set_defaults(func=cmd_collect)
    _inventory_actions(action)


def _inventory_actions(action: Callable[..., argparse.ArgumentParser]) -> None:
    devices = action("devices", "every enrolled or reporting device: labels, booted version, "
                                "last verdict and contact; silent ones flagged",
                     ref=False, site=False)
    devices.add_argument("--json", action="store_true", dest="as_json",
                         help="print the inventory as JSON")
    devices.add_argument("--silent-after", type=_hours, default=24.0, metavar="HOURS",
                         help="flag a device with no verdict for longer (default 24)")
    devices.set_defaults(func=cmd_devices)
    enroll = action("enroll", "pin a device's public key before its first verdict", ref=False)
    enroll.add_argument("machine_id", help="the device's /etc/machine-id")
    enroll.add_argument("public_key", type=Path, help="its public key (PEM: `openssl pkey "
                        "-in /var/lib/microshift-update/device-key.pem -pubout`)")
    enroll.add_argument("--label", action="append", default=[], metavar="NAME=VALUE",
                        help="pin a label of the device (repeat for each; its labels: in "
                             "update.yaml); without any, its first verdict pins them")
    enroll.set_defaults(func=cmd_enroll)


def _serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--listen", default="127.0.0.1:8480", metavar="HOST:PORT",
                       help="where to listen (default 127.0.0.1:8480; port 0: any free one)")
    serve.add_argument("--enrolled-only", action="store_true",
                       help="take verdicts of enrolled devices only (`rollout enroll`)")
    _limit_options(serve)
    serve.add_argument("--header-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                       help="drop a client whose request headers are not whole by then "
                            "(default 10)")
    serve.add_argument("--request-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                       help="drop a client whose request is not whole by then (default 30)")
    serve.add_argument("--admin-token-file", type=Path, metavar="FILE",
                       help="the console's actions (advance, halt, resume) need this token "
                            "(a private file; without it the console is read-only)")
    serve.add_argument("--viewer-token-file", type=Path, metavar="FILE",
                       help="the console's read-only pages need this token (or the admin's); "
                            "without it they are open to whoever reaches --listen")
    serve.set_defaults(func=cmd_serve)


def _status_options(status: argparse.ArgumentParser) -> None:
    status.add_argument("--json", action="store_true", dest="as_json",
                        help="print the status as JSON")
    status.add_argument("--slot-silent-after", type=_hours, default=6.0, metavar="HOURS",
                        help="call a disruption budget stalled when a device holding a slot "
                             "sent no verdict for longer while others wait (default 6)")
    status.set_defaults(func=cmd_status)


def _limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-verdicts-per-device", type=int, default=200, metavar="N",
                        help="refuse a device's verdicts for one rollout past N (default 200)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is not between 0.1 and 3600 seconds")
    return value


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not 0 < value <= 24 * 365:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and {24 * 365} hours")
    return value


def _site(args: argparse.Namespace) -> Site:
    from builder.rollout.admin import Site

    if not (args.site / "updates").is_dir():
        raise InputError("command line", "--site", f"{args.site} has no updates/: not a "
                         "published directory")
    return Site(args.site.resolve())


def _signer(ctx: Context, args: argparse.Namespace) -> Signer:
    signer = _maybe_signer(ctx, args)
    if signer is None:
        raise InputError("command line", "--gpg-homedir/--gpg-key", "the statement carrying "
                         "the rollout is signed with the release key: give it")
    return signer


def _maybe_signer(ctx: Context, args: argparse.Namespace) -> Signer | None:
    from builder.core.signing import release_signing_key
    from builder.rollout.admin import Signer

    key = release_signing_key(ctx.runner, ctx.progress, args.gpg_homedir, args.gpg_key,
                              sample_home=None, epoch=0)
    return None if key is None else Signer(ctx.runner, key)


def _store(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The collector's database; only the collector and `enroll` make a new one (a typo in
    --db must not look like a rollout nobody reported on)."""
    from builder.rollout.store import Store

    if not create and not args.db.is_file():
        raise InputError("command line", "--db", f"{args.db} does not exist",
                         hint="give the database `rollout serve --db` keeps")
    return Store(args.db)


def cmd_start(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.admin import start

    if not args.ref:
        raise InputError("command line", "--ref", "name the ref whose head to roll out")
    plan = rollout_plan(args)
    assert plan is not None  # --rollout-waves is required here
    rollout = start(_site(args), _signer(ctx, args), args.ref, plan, int(time.time()))
    ctx.progress.info(f"rollout {rollout.id} of {rollout.commit[:12]} started: wave 1 of "
                      f"{len(rollout.waves)} ({rollout.waves[0].selector()}) open")
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.admin import status, status_text

    report = status(_site(args), _store(args), args.ref, int(time.time()),
                    holder_silent_after=int(args.slot_silent_after * 3600))
    sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n" if args.as_json
                     else status_text(report) + "\n")
    return 0


def cmd_devices(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.inventory import inventory, inventory_json, inventory_text

    now, silent_after = int(time.time()), int(args.silent_after * 3600)
    store = _store(args)
    try:
        found = inventory(store, now, silent_after)
    finally:
        store.close()
    sys.stdout.write(inventory_json(found, silent_after) if args.as_json
                     else inventory_text(found, now))
    return 0


def cmd_advance(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.admin import advance, open_wave

    rollout = advance(_site(args), _store(args), _signer(ctx, args), args.ref,
                      int(time.time()), force=args.force)
    if rollout.state == "complete":
        ctx.progress.info(f"rollout {rollout.id}: complete, every wave passed")
    else:
        wave = open_wave(rollout)
        ctx.progress.info(f"rollout {rollout.id}: wave {wave + 1} of {len(rollout.waves)} "
                          f"({rollout.waves[wave].selector()}) open")
    return 0


def cmd_halt(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.admin import halt

    rollout = halt(_site(args), _signer(ctx, args), args.ref, args.reason)
    ctx.progress.info(f"rollout {rollout.id}: halted ({rollout.reason})")
    return 0


def cmd_resume(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.admin import resume

    store = _store(args) if args.db.is_file() else None   # grants budget slots with it
    rollout = resume(_site(args), _signer(ctx, args), args.ref, store, int(time.time()))
    ctx.progress.info(f"rollout {rollout.id}: active again")
    return 0


def _collector(ctx: Context, args: argparse.Namespace, limits: Limits) -> Any:
    from builder.rollout.collector import Collector

    signer = _maybe_signer(ctx, args)
    if signer is None:
        ctx.progress.warn("no release key (--gpg-homedir/--gpg-key): a wave over its halt "
                          "threshold is reported, not halted, and no disruption budget slot "
                          "is granted (`rollout status` shows the budget stalled)")
    if not 1 <= limits.max_verdicts <= 1_000_000:
        raise InputError("command line", "--max-verdicts-per-device",
                         f"{limits.max_verdicts} is not from 1 to 1000000")
    return Collector(_site(args), _store(args, create=True), signer, args.enrolled_only,
                     ctx.progress.info, limits)


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.collector import Limits, serve
    from builder.rollout.console import Console, read_token

    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise InputError("command line", "--listen", f"{args.listen!r} is not HOST:PORT")
    tokens = [None if path is None else read_token(path, option) for path, option in
              ((args.admin_token_file, "--admin-token-file"),
               (args.viewer_token_file, "--viewer-token-file"))]
    collector = _collector(ctx, args, Limits(args.header_timeout, args.request_timeout,
                                             args.max_verdicts_per_device))
    console = Console(collector.site, collector.store, collector.signer, admin_token=tokens[0],
                      viewer_token=tokens[1], log=ctx.progress.info)

    def ready(url: str) -> None:
        page = url.removesuffix("/verdicts") + "/console/"
        ctx.progress.info(f"collector listening on {url}; console on {page}", url=url,
                          console=page)

    serve(collector, host, int(port), ready, console)
    return 0


def cmd_collect(ctx: Context, args: argparse.Namespace) -> int:
    """Every good file recorded, every bad one named; exit 1 when any was refused."""
    from builder.rollout.collector import Limits

    limits = Limits(max_verdicts=args.max_verdicts_per_device)
    tally, problems = _collector(ctx, args, limits).collect(args.paths)
    for line in problems:
        ctx.progress.warn(line)
    ctx.progress.info("verdict files: " + (", ".join(f"{k} {v}" for k, v in
                                                     sorted(tally.items())) or "none"),
                      **tally)
    return 1 if problems else 0


def cmd_enroll(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rollout.verdict_check import Refused, public_key_of
    from builder.updater.rollout_rules import LABEL_RE

    try:
        with args.public_key.open("rb") as handle:
            pem = handle.read(PEM_LIMIT + 1).decode("ascii")
    except (OSError, UnicodeError) as exc:
        raise InputError(str(args.public_key), "", f"cannot be read ({exc})") from None
    if len(pem) > PEM_LIMIT:
        raise InputError(str(args.public_key), "", f"is over {PEM_LIMIT} bytes: not a public "
                         "key")
    try:
        public_key_of(pem)
    except Refused as exc:
        raise InputError(str(args.public_key), "", exc.detail) from None
    if not args.machine_id.isalnum() or len(args.machine_id) > 64:
        raise InputError("command line", "machine_id", f"{args.machine_id!r} is not a "
                         "machine id")
    labels: dict[str, str] = {}
    for text in args.label:
        name, sep, value = text.partition("=")
        if not sep or not LABEL_RE.match(name) or not LABEL_RE.match(value):
            raise InputError("command line", "--label", f"{text!r} is not NAME=VALUE (letters, "
                             "digits, '.', '_', '/', '-')")
        labels[name] = value
    _store(args, create=True).enroll(args.machine_id, pem, labels or None)
    ctx.progress.info(f"enrolled {args.machine_id}: its verdicts must carry this key"
                      + (f" and the labels {labels}" if labels else ""))
    return 0
