"""What every command gets: the release, the build directory, progress output and the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.release.model import Release, load_release


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
