"""Jinja2 rendering shared by specs, package sources, blueprints and kickstarts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from builder.context import PROJECT_ROOT
from builder.errors import BuildError, InputError
from builder.release import Release

SPECS_DIR = PROJECT_ROOT / "specs"
SOURCES_DIR = SPECS_DIR / "sources"
PACKAGER = "MicroShift release engineering <microshift-builder@example.invalid>"


def environment(search_path: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(search_path)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # renders specs, YAML, TOML and kickstarts, never HTML
    )


def render_file(search_path: Path, name: str, context: Mapping[str, Any]) -> str:
    """Render `name` under `search_path`; a template error names the template and line."""
    try:
        return environment(search_path).get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        raise BuildError(f"{exc.filename or name}:{exc.lineno}: template error: {exc.message}") \
            from exc
    except jinja2.UndefinedError as exc:
        raise BuildError(f"{search_path / name}: template error: {exc.message}") from exc


class ReleaseImages(dict[str, str]):
    """A component's images by logical name; asking for one release.yaml lacks names the
    field to add (Jinja would only say "'dict object' has no attribute ...")."""

    def __init__(self, release: Release, key: str, images: dict[str, str]) -> None:
        super().__init__(images)
        self.release_path = str(release.path)
        self.key = key

    def __missing__(self, name: str) -> str:
        raise InputError(self.release_path, f"components.{self.key}.images.{name}",
                         "is missing: the component's manifests use this image",
                         hint="add it, pinned by digest (REPOSITORY@sha256:...)")


def component_context(release: Release, key: str) -> dict[str, Any]:
    """What a component's spec and `.j2` sources see."""
    comp = release.component(key)
    return {
        "release": release,
        "version": release.version,
        "rpm_release": release.release,
        "component": key,
        "packager": PACKAGER,
        "images": ReleaseImages(release, key, {img.name: img.ref for img in comp.images}),
        "all_images": {img.name: img.ref for img in release.images()},
    }


def render_source_tree(package: str, context: Mapping[str, Any], dest: Path) -> list[Path]:
    """Copy specs/sources/PACKAGE/ to dest, rendering `*.j2` files (suffix dropped).

    Returns the written files relative to dest, sorted. File modes follow the source:
    executable files stay executable; everything else is 0644.
    """
    source_root = SOURCES_DIR / package
    written: list[Path] = []
    if not source_root.is_dir():
        return written
    for src in sorted(p for p in source_root.rglob("*") if p.is_file() and not _stray(p)):
        rel = src.relative_to(source_root)
        if src.suffix == ".j2":
            rel = rel.with_suffix("")
            text = render_file(source_root, rel.as_posix() + ".j2", context)
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        else:
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
        out.chmod(0o755 if os.access(src, os.X_OK) else 0o644)
        written.append(rel)
    return written


def _stray(path: Path) -> bool:
    """Byte-code caches appear when tests import a Python plugin; they never ship."""
    return "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo")
