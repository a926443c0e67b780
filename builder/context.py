"""What every command gets: the release, the build directory, progress output and the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from builder.progress import Progress
from builder.release import Release, load_release
from builder.runner import Runner

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Context:
    build_dir: Path
    release_path: Path
    progress: Progress = field(default_factory=Progress)
    runner: Runner = field(default_factory=Runner)

    @cached_property
    def release(self) -> Release:
        return load_release(self.release_path)

    def path(self, *parts: str) -> Path:
        return self.build_dir.joinpath(*parts)
