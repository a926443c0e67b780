"""Jinja2 rendering shared by specs, package sources, blueprints and kickstarts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from builder.core.errors import BuildError
from builder.core.paths import SOURCES_DIR
from builder.core.zipapp import SUFFIX as ZIPAPP_SUFFIX
from builder.core.zipapp import build_zipapp


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


def render_source_tree(package: str, context: Mapping[str, Any], dest: Path) -> list[Path]:
    """Copy specs/sources/PACKAGE/ to dest, rendering `*.j2` files (suffix dropped) and
    building `NAME.zipapp.yaml` into the executable zip application NAME (builder.core.zipapp).

    Returns the written files relative to dest, sorted. File modes follow the source:
    executable files stay executable; everything else is 0644.
    """
    source_root = SOURCES_DIR / package
    written: list[Path] = []
    if not source_root.is_dir():
        return written
    for src in sorted(p for p in source_root.rglob("*") if p.is_file() and not _stray(p)):
        rel = src.relative_to(source_root)
        if src.name.endswith(ZIPAPP_SUFFIX):
            rel = rel.with_name(src.name.removesuffix(ZIPAPP_SUFFIX))
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(build_zipapp(src))
            out.chmod(0o755)
            written.append(rel)
            continue
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
