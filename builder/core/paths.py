"""Where the project's own inputs live: spec templates, blueprints, kickstarts."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
SPECS_DIR = PROJECT_ROOT / "specs"
SOURCES_DIR = SPECS_DIR / "sources"
# The SAMPLE bootable base OS: its Debian package list and the files laid over it.
BASEOS_DIR = PROJECT_ROOT / "baseos"
