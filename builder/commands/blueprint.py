"""`blueprint`: render, validate and depsolve one image profile's Image Builder blueprint."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from builder.commands.options import add_build_dir
from builder.context import Context


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "blueprint", help="render, validate and depsolve an image's blueprint",
        description="Render blueprints/NAME.toml.j2 for the release, check it against Image "
                    "Builder's rules and the offline image cache, depsolve its packages with "
                    "libsolv, and write DIR/blueprints/NAME.toml and NAME.ARCH.lock.json. Fails, "
                    "writing nothing, when any of these fails.")
    add_build_dir(parser)
    parser.add_argument("--image", action="append", metavar="NAME",
                        help="image profile from blueprints/profiles.yaml (repeatable; "
                             "default: microshift-full; `all` for every profile)")
    parser.add_argument("--blueprints", type=Path, default=None, metavar="DIR",
                        help="directory with profiles.yaml and the templates "
                             "(default: the project's blueprints/)")
    parser.set_defaults(func=cmd_blueprint)


def cmd_blueprint(ctx: Context, args: argparse.Namespace) -> int:
    from builder.blueprint.build import build_blueprint
    from builder.blueprint.render import BLUEPRINTS_DIR, load_profiles

    blueprints_dir = (args.blueprints or BLUEPRINTS_DIR).resolve()
    names: list[str] = args.image or ["microshift-full"]
    if "all" in names:
        names = sorted(load_profiles(blueprints_dir))
    ctx.release  # validate release.yaml before any work  # noqa: B018
    for name in names:
        out = build_blueprint(ctx, name, blueprints_dir)
        ctx.progress.info(f"{name}: {out.toml} and {', '.join(p.name for p in out.locks)} "
                          f"({out.packages} packages locked)")
    return 0
