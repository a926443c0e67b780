"""Jinja2 rendering shared by specs, package sources, blueprints and kickstarts."""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from builder.core.errors import BuildError
from builder.core.paths import PROJECT_ROOT, SOURCES_DIR
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


# What template code can raise while it runs: Jinja's own errors, and a filter or an
# expression on a value of the wrong kind (`{{ 1/0 }}`, `{{ [] | toml }}`).
RENDER_ERRORS = (jinja2.TemplateError, ArithmeticError, TypeError, ValueError, LookupError,
                 AttributeError)


def render_file(search_path: Path, name: str, context: Mapping[str, Any]) -> str:
    """Render `name` under `search_path`; a template error names the template and line."""
    return render_with(environment(search_path), search_path, name, context)


def render_with(env: jinja2.Environment, search_path: Path, name: str,
                context: Mapping[str, Any]) -> str:
    """Render with `env`; any error of the template's code is one BuildError naming the
    template file and line, as Jinja maps it, not a traceback from inside Jinja."""
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        where = relative(Path(exc.filename) if exc.filename else search_path / name)
        raise BuildError(f"{where}:{exc.lineno}: template error: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        raise BuildError(f"{relative(search_path / name)}: template error: no template "
                         f"{exc.name!r}") from None
    except RENDER_ERRORS as exc:
        message = exc.message if isinstance(exc, jinja2.TemplateError) else \
            f"{type(exc).__name__}: {exc}"
        raise BuildError(f"{template_frame(exc, search_path, name)}: template error: "
                         f"{message}") from None


def template_frame(exc: BaseException, search_path: Path, name: str) -> str:
    """template:line of the innermost template frame of a render-time error.

    Jinja rewrites tracebacks so that template code shows up with the template's file name
    and line number, which is how a runtime error (an undefined value) gets its line.
    """
    where = relative(search_path / name)
    tb: types.TracebackType | None = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            where = f"{relative(Path(filename))}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def render_source_tree(package: str, context: Mapping[str, Any], dest: Path, *,
                       sources: Path = SOURCES_DIR) -> list[Path]:
    """Copy specs/sources/PACKAGE/ to dest, rendering `*.j2` files (suffix dropped) and
    building `NAME.zipapp.yaml` into the executable zip application NAME (builder.core.zipapp).

    Returns the written files relative to dest, sorted. File modes follow the source:
    executable files stay executable; everything else is 0644.
    """
    source_root = sources / package
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
