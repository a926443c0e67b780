"""`composer`: talk to an Image Builder service (osbuild-composer) over its Weldr API.

    python -m builder composer compose --image NAME --build-dir DIR --type edge-commit \\
        --ref rhel/9/x86_64/edge [--parent REF_OR_COMMIT --url OSTREE_REPO_URL]
    python -m builder composer push --image NAME --build-dir DIR
    python -m builder composer depsolve --image NAME
    python -m builder composer status UUID [--wait]
    python -m builder composer fetch UUID --image NAME --build-dir DIR

Every action takes --socket PATH (default /run/weldr/api.socket) or --service-url URL, and
--timeout SECONDS for each answer. `--url` is the ostree repo URL, as in
`composer-cli compose start-ostree --url`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.commands.options import add_build_dir
from builder.composer.remote import (
    COMPOSE_TYPES,
    ComposeOptions,
    ComposeResult,
    WaitOptions,
    describe_package,
    fetch_result,
    load_blueprint,
    run_compose,
    wait_for_compose,
)
from builder.context import Context
from builder.core.errors import InputError

if TYPE_CHECKING:
    from builder.composer.client import WeldrClient

DEFAULT_REF = "rhel/9/x86_64/edge"


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--socket", type=Path, default=None,
                       help="Weldr API unix socket (default: /run/weldr/api.socket)")
    # Not --url: composer-cli's `compose start-ostree --url` means the ostree repo URL,
    # and `compose --url` keeps that meaning here.
    where.add_argument("--service-url", dest="service_url", default=None, metavar="URL",
                       help="reach the service over TCP instead, e.g. http://builder:8080")
    common.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for any one answer from the service (default 60)")
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--poll-interval", type=float, default=5.0,
                         help="seconds between status polls (default 5)")
    waiting.add_argument("--wait-timeout", type=float, default=None,
                         help="give up waiting for the compose after this many seconds")

    parser = sub.add_parser("composer", help="build images on an Image Builder service "
                            "(osbuild-composer) over the Weldr API")
    actions = parser.add_subparsers(dest="composer_action", required=True, metavar="ACTION")

    compose = actions.add_parser("compose", parents=[common, waiting],
                                 help="push + depsolve + compose + wait + download + import")
    add_build_dir(compose)
    _add_image(compose)
    compose.add_argument("--type", dest="compose_type", choices=COMPOSE_TYPES,
                         default="edge-commit", help="image type (default edge-commit)")
    compose.add_argument("--ref", default=DEFAULT_REF, help=f"ostree ref (default {DEFAULT_REF})")
    compose.add_argument("--parent", default=None,
                         help="parent ref or commit checksum for an upgrade commit")
    compose.add_argument("--url", dest="ostree_url", default=None,
                         metavar="URL", help="URL of the ostree repo holding the parent "
                         "(required with --parent and for edge-installer)")
    compose.set_defaults(func=cmd_compose)

    push = actions.add_parser("push", parents=[common], help="push DIR/blueprints/NAME.toml")
    add_build_dir(push)
    _add_image(push)
    push.set_defaults(func=cmd_push)

    depsolve = actions.add_parser("depsolve", parents=[common],
                                  help="depsolve a pushed blueprint, print its packages")
    _add_image(depsolve)
    depsolve.set_defaults(func=cmd_depsolve)

    status = actions.add_parser("status", parents=[common, waiting],
                                help="print a compose's queue status")
    status.add_argument("uuid")
    status.add_argument("--wait", action="store_true", help="follow it until it ends")
    status.set_defaults(func=cmd_status)

    fetch = actions.add_parser("fetch", parents=[common],
                               help="download a FINISHED compose (and import an edge-commit)")
    add_build_dir(fetch)
    _add_image(fetch)
    fetch.add_argument("uuid")
    fetch.add_argument("--ref", default=None, help="fail unless the commit is on this ref")
    fetch.set_defaults(func=cmd_fetch)


def _add_image(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", required=True, metavar="NAME",
                        help="blueprint name (DIR/blueprints/NAME.toml)")


def _client(args: argparse.Namespace) -> WeldrClient:
    # Imported here: requests is only loaded when a composer action actually runs.
    from builder.composer.client import Endpoint, WeldrClient

    if args.timeout <= 0:
        raise InputError("command line", "--timeout", f"{args.timeout:g} must be above 0")
    if args.service_url is not None:
        if not args.service_url.startswith(("http://", "https://")):
            raise InputError("command line", "--service-url", f"{args.service_url!r} is not an "
                             "http:// or https:// URL")
        endpoint = Endpoint(socket=None, url=args.service_url)
    else:
        endpoint = Endpoint(socket=args.socket) if args.socket else Endpoint()
    return WeldrClient(endpoint, timeout=args.timeout)


def _wait_options(args: argparse.Namespace) -> WaitOptions:
    if args.poll_interval < 0:
        raise InputError("command line", "--poll-interval", f"{args.poll_interval:g} is negative")
    if args.wait_timeout is not None and args.wait_timeout <= 0:
        raise InputError("command line", "--wait-timeout", f"{args.wait_timeout:g} must be above 0")
    return WaitOptions(poll_interval=args.poll_interval, timeout=args.wait_timeout)


def _report(result: ComposeResult) -> None:
    print(f"{result.uuid} {result.compose_type} {result.artifact}")
    if result.commit is not None:
        print(f"{result.commit.ref} {result.commit.commit}")


def cmd_compose(ctx: Context, args: argparse.Namespace) -> int:
    options = ComposeOptions(compose_type=args.compose_type, ref=args.ref,
                             parent=args.parent, url=args.ostree_url)
    client = _client(args)
    try:
        result = run_compose(client, build_dir=ctx.build_dir, image=args.image, options=options,
                             wait=_wait_options(args), progress=ctx.progress,
                             runner=ctx.runner)
    finally:
        client.close()
    _report(result)
    return 0


def cmd_push(ctx: Context, args: argparse.Namespace) -> int:
    blueprint = load_blueprint(ctx.build_dir, args.image)
    client = _client(args)
    try:
        with ctx.progress.step(f"push blueprint {blueprint.name}"):
            client.push_blueprint(blueprint.text)
    finally:
        client.close()
    return 0


def cmd_depsolve(ctx: Context, args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        packages = client.depsolve(args.image)
    finally:
        client.close()
    for pkg in sorted(packages, key=lambda p: str(p.get("name"))):
        print(describe_package(pkg))
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        if args.wait:
            status = wait_for_compose(client, args.uuid, ctx.progress, _wait_options(args))
        else:
            status = client.status(args.uuid)
    finally:
        client.close()
    print(f"{status.uuid} {status.queue_status} {status.compose_type} {status.blueprint} "
          f"{status.version}")
    return 0


def cmd_fetch(ctx: Context, args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        status = client.status(args.uuid)
        result = fetch_result(client, status, build_dir=ctx.build_dir, image=args.image,
                              progress=ctx.progress, runner=ctx.runner, expected_ref=args.ref)
    finally:
        client.close()
    _report(result)
    return 0
