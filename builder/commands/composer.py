"""`composer`: build on an Image Builder service (osbuild-composer) over its Weldr API.

    python -m builder composer compose --image NAME --build-dir DIR [--type commit|installer]
        [--ref REF] [--serve-repo HOST:PORT | --url OSTREE_REPO_URL [--parent REF_OR_COMMIT]]
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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.commands.options import add_build_dir, add_signing_options
from builder.context import Context
from builder.core.errors import InputError
from builder.imagebuilder.request import TYPE_CHOICES, ComposeOptions
from builder.imagebuilder.wait import WaitOptions, wait_for_compose

if TYPE_CHECKING:
    from builder.imagebuilder.client import WeldrClient
    from builder.imagebuilder.results import ComposeResult


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

    _register_compose(actions, [common, waiting])

    push = actions.add_parser("push", parents=[common], help="push DIR/blueprints/NAME.toml "
                              "(not again when the service holds it already)")
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
                               help="download a FINISHED compose and publish it")
    add_build_dir(fetch)
    _add_image(fetch)
    fetch.add_argument("uuid")
    _add_ref(fetch, "fail unless the commit is on this ref (default: the ref it was composed "
                    "for, when composed from here)")
    add_signing_options(fetch)
    fetch.set_defaults(func=cmd_fetch)


def _register_compose(actions: Any, parents: list[argparse.ArgumentParser]) -> None:
    compose = actions.add_parser("compose", parents=parents,
                                 help="push + depsolve + compose + wait + download + publish")
    add_build_dir(compose)
    _add_image(compose)
    compose.add_argument("--type", dest="image_type", choices=TYPE_CHOICES, default="commit",
                         help="commit or installer: the service's edge-* (RHEL) or iot-* "
                              "(Fedora) type, whichever it offers; or that type by name "
                              "(default commit)")
    _add_ref(compose, "ostree ref of the commit (default: the one `compose` uses: "
                      "release.yaml ostree.ref, else the profile's)")
    source = compose.add_mutually_exclusive_group()
    source.add_argument("--serve-repo", dest="serve", metavar="HOST:PORT", default=None,
                        help="serve DIR/ostree/repo to the workers at this address of this "
                             "machine while the compose runs (commit parent, installer payload)")
    source.add_argument("--url", dest="ostree_url", default=None, metavar="URL",
                        help="URL at which the workers reach DIR/ostree/repo as published "
                             "(needed for installers; commits get the ref's head as parent)")
    compose.add_argument("--parent", default=None,
                         help="parent ref or commit (default: the ref's head in DIR/ostree/repo)")
    add_signing_options(compose)
    compose.set_defaults(func=cmd_compose)


def _add_image(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", required=True, metavar="NAME",
                        help="blueprint name (DIR/blueprints/NAME.toml)")


def _add_ref(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--ref", default=None, help=text)


def _client(args: argparse.Namespace) -> WeldrClient:
    # Imported here: requests is only loaded when a composer action actually runs.
    from builder.imagebuilder.client import Endpoint, WeldrClient

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


def _uuid(text: str) -> str:
    from builder.imagebuilder.client import normalize_uuid

    uuid = normalize_uuid(text)
    if uuid is None:
        raise InputError("command line", "UUID", f"{text!r} is not a compose id; give the "
                         "build_id the compose printed, e.g. 0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    return uuid


def _wait_options(args: argparse.Namespace) -> WaitOptions:
    if args.poll_interval < 0:
        raise InputError("command line", "--poll-interval", f"{args.poll_interval:g} is negative")
    if args.wait_timeout is not None and args.wait_timeout <= 0:
        raise InputError("command line", "--wait-timeout", f"{args.wait_timeout:g} must be above 0")
    return WaitOptions(poll_interval=args.poll_interval, timeout=args.wait_timeout)


def _report(result: ComposeResult) -> None:
    print(f"{result.uuid} {result.compose_type} {result.artifact}")
    if result.commit is not None:
        print(f"{result.commit.ref} {result.commit.commit} {result.commit.version}")


def cmd_compose(ctx: Context, args: argparse.Namespace) -> int:
    from builder.imagebuilder.remote import ComposeJob, check_job, run_compose
    from builder.plan import Keys, image_targets

    _one_architecture(ctx)
    try:
        [target] = image_targets(ctx, [args.image], args.ref)
    except InputError as exc:
        raise InputError("command line", "--ref", f"no default ref for image "
                         f"{args.image!r} ({exc.message}); give --ref") from exc
    ref = target.ref
    options = ComposeOptions(image_type=args.image_type, ref=ref, parent=args.parent,
                             url=args.ostree_url)
    job = ComposeJob(build_dir=ctx.build_dir, image=args.image, release=ctx.release,
                     options=options, wait=_wait_options(args), serve=args.serve)
    check_job(job)  # before a signing key is made or the service is asked anything
    job = replace(job, key=Keys.of(ctx, args.gpg_homedir, args.gpg_key).signing)
    client = _client(args)
    try:
        result = run_compose(client, job, ctx.progress, ctx.runner)
    finally:
        client.close()
    _report(result)
    return 0



def cmd_push(ctx: Context, args: argparse.Namespace) -> int:
    from builder.imagebuilder.blueprints import load_blueprint, sync_blueprint

    blueprint = load_blueprint(ctx.build_dir, args.image)
    client = _client(args)
    try:
        with ctx.progress.step(f"push blueprint {blueprint.name}"):
            sync_blueprint(client, blueprint.data, blueprint.text, ctx.progress)
    finally:
        client.close()
    return 0


def cmd_depsolve(ctx: Context, args: argparse.Namespace) -> int:
    from builder.imagebuilder.remote import describe_package

    client = _client(args)
    try:
        packages = client.depsolve(args.image)
    finally:
        client.close()
    for pkg in sorted(packages, key=lambda p: str(p.get("name"))):
        print(describe_package(pkg))
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    uuid = _uuid(args.uuid)
    wait = _wait_options(args) if args.wait else None
    client = _client(args)
    try:
        if wait is not None:
            status = wait_for_compose(client, uuid, ctx.progress, wait)
        else:
            status = client.status(uuid)
    finally:
        client.close()
    print(f"{status.uuid} {status.queue_status} {status.compose_type} {status.blueprint} "
          f"{status.version}")
    return 0


def _one_architecture(ctx: Context) -> None:
    """An Image Builder service composes for the machine it runs on: one architecture."""
    if len(ctx.release.architectures) > 1:
        raise InputError("command line", "--arch",
                         "an Image Builder service composes for its own architecture; the "
                         f"release builds {', '.join(ctx.release.architectures)}",
                         hint="run once per architecture with --arch ARCH, against a "
                              "service on a machine of that architecture")


def cmd_fetch(ctx: Context, args: argparse.Namespace) -> int:
    from builder.imagebuilder.request import kind_of
    from builder.imagebuilder.results import Target, fetch_result
    from builder.plan import Keys

    _one_architecture(ctx)
    uuid = _uuid(args.uuid)
    client = _client(args)
    try:
        status = client.status(uuid)
        # Only a commit is signed; ask for the key once the compose is known to be one.
        key = Keys.of(ctx, args.gpg_homedir, args.gpg_key).signing \
            if kind_of(status.compose_type) == "commit" else None
        target = Target(ctx.build_dir, args.image, ctx.release, key, args.ref)
        result = fetch_result(client, status, target, ctx.progress, ctx.runner)
    finally:
        client.close()
    _report(result)
    return 0
