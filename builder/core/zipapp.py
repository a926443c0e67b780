"""Deterministic Python zip applications of the project's own modules.

A package source named `NAME.zipapp.yaml` (see builder.core.templates.render_source_tree)
becomes `NAME`: an executable zip (PEP 441) holding the listed modules of this project and a
`__main__.py` that calls `main`. Devices then run the very code the builder runs, shipped
once, never copied by hand:

    interpreter: /usr/bin/python3 -I
    main: builder.components.microshift_components:main
    modules: [builder/__init__.py, builder/core/errors.py, ...]

The bytes depend only on the listed files' contents: fixed timestamps, sorted entries.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.paths import PROJECT_ROOT
from builder.core.schema import Fields, load_yaml

SUFFIX = ".zipapp.yaml"
MAIN_RE = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)$")
MODULE_RE = re.compile(r"^builder(/[A-Za-z_]\w*)*\.py$")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def build_zipapp(spec: Path, project_root: Path = PROJECT_ROOT) -> bytes:
    """The zip application described by the YAML file `spec`."""
    top = Fields(str(spec), "", load_yaml(spec))
    interpreter = top.check("interpreter", top.get("interpreter", str, required=True),
                            lambda i: i.startswith("/") and "\n" not in i,
                            "an absolute interpreter path with optional flags")
    main = top.check("main", top.get("main", str, required=True), MAIN_RE.match,
                     "MODULE:FUNCTION")
    modules = top.get("modules", list, required=True)
    for module in modules:
        top.check("modules", module, lambda m: isinstance(m, str) and MODULE_RE.match(m),
                  "paths of this project's modules, e.g. builder/core/errors.py")
    top.close()
    match = MAIN_RE.match(main)
    assert match is not None
    entry = (f"import sys\nfrom {match['module']} import {match['function']}\n\n"
             f"sys.exit({match['function']}())\n")
    buffer = io.BytesIO()
    buffer.write(f"#!{interpreter}\n".encode())
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(set(modules)):
            path = project_root / name
            if not path.is_file():
                raise BuildError(f"{spec}: modules: {name} does not exist in {project_root}")
            _add(archive, name, path.read_bytes())
        _add(archive, "__main__.py", entry.encode())
    return buffer.getvalue()


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)
