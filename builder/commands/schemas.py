"""`schemas`: write (or check) the JSON Schemas of the input files, generated from their models.

    python -m builder schemas            # rewrite schemas/*.schema.json
    python -m builder schemas --check    # exit 1 when a shipped schema differs from its model

Editors that speak the YAML language server (VS Code's YAML extension, Neovim, Helix, ...)
validate and complete a file that starts with
`# yaml-language-server: $schema=<path to the schema>`; `check-jsonschema --schemafile
schemas/release.schema.json release.yaml` does the same on the command line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.paths import PROJECT_ROOT

SCHEMAS_DIR = PROJECT_ROOT / "schemas"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "schemas", help="write or check the JSON Schemas of the input files (schemas/)",
        description="Generate schemas/NAME.schema.json from the models of release.yaml, "
                    "profiles.yaml, config.yaml, ovn.yaml, lvmd.yaml and update.yaml.")
    parser.add_argument("--out", type=Path, default=SCHEMAS_DIR,
                        help="directory to write to (default: the project's schemas/)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail when a schema differs from its model")
    parser.set_defaults(func=cmd_schemas)


def generated() -> dict[str, str]:
    """File name -> schema text, for every input file with a model."""
    from builder.blueprint.profiles import ProfilesDocument
    from builder.components.schemas import DOCUMENTS
    from builder.release.document import ReleaseDocument
    from builder.updater.update_model import UpdateDocument

    models: dict[str, type[BaseModel]] = {"release": ReleaseDocument,
                                          "profiles": ProfilesDocument, **DOCUMENTS,
                                          "update": UpdateDocument}
    texts = {}
    for name, model in models.items():
        schema: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                  **model.model_json_schema(by_alias=True)}
        _close_pattern_properties(schema)
        if name in ("config", "update"):  # an empty file means every default
            schema["type"] = ["object", "null"]
        texts[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return texts


def _close_pattern_properties(node: Any) -> None:
    """pydantic writes a mapping with constrained keys as `patternProperties` alone, which lets
    any other key through; the tool refuses such keys, so the schema does too."""
    if isinstance(node, dict):
        if "patternProperties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            _close_pattern_properties(value)
    elif isinstance(node, list):
        for value in node:
            _close_pattern_properties(value)


def cmd_schemas(ctx: Context, args: argparse.Namespace) -> int:
    texts = generated()
    if args.check:
        stale = [name for name, text in texts.items()
                 if not (args.out / name).is_file() or (args.out / name).read_text() != text]
        if stale:
            raise BuildError(f"{', '.join(stale)} in {args.out} differ from the models",
                             hint="run `python -m builder schemas` and commit the result")
        ctx.progress.info(f"{len(texts)} schemas in {args.out} match their models")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        tmp = args.out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(args.out / name)
    ctx.progress.info(f"wrote {len(texts)} schemas to {args.out}")
    return 0
