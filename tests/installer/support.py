"""Inputs the kickstart and installer tests share: rendered blueprints and a pull secret."""

from __future__ import annotations

import json
from pathlib import Path

from builder.blueprint.render import load_profile, render_blueprint
from builder.release.model import load_release
from tests.support.cli import RELEASE

SECRET_TOKEN = "c2VjcmV0LXRva2VuLTQyCg=="  # test value: a recognisable fake credential


def make_pull_secret(directory: Path) -> Path:
    path = directory / "pull-secret.json"
    path.write_text(json.dumps({"auths": {"quay.io": {"auth": SECRET_TOKEN}}}, indent=2))
    return path


def write_blueprints(build_dir: Path, *names: str) -> None:
    release = load_release(RELEASE)
    out = build_dir / "blueprints"
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        (out / f"{name}.toml").write_text(render_blueprint(release, load_profile(name)))
