"""What every command gets: the release, the build directory, progress output and the runner."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from builder.core.build_layout import Layout
from builder.core.errors import InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.release.model import Release, load_release


@dataclass(frozen=True)
class Context:
    build_dir: Path
    release_path: Path
    progress: Progress = field(default_factory=Progress)
    runner: Runner = field(default_factory=Runner)
    # Build only this one of the release's architectures (a CI matrix runs one per job).
    arch: str | None = None
    # The release already read (and narrowed to `arch`), so a narrowed context does not
    # read release.yaml again.
    loaded: Release | None = field(default=None, repr=False, compare=False)

    @property
    def layout(self) -> Layout:
        return Layout(self.build_dir)

    @cached_property
    def release(self) -> Release:
        if self.loaded is not None:
            return self.loaded
        release = load_release(self.release_path)
        if self.arch is None:
            return release
        if self.arch not in release.architectures:
            raise InputError("command line", "--arch",
                             f"{self.arch!r} is not an architecture of {self.release_path} "
                             f"(architectures: {', '.join(release.architectures)})")
        return replace(release, architectures=(self.arch,))

    def for_arch(self, arch: str) -> Context:
        """This run narrowed to one of its architectures, for the stages that build one
        architecture at a time (compose, SBOM, deltas, installer); same progress and runner."""
        if arch not in self.release.architectures:
            raise InputError("command line", "--arch",
                             f"{arch!r} is not an architecture of this run "
                             f"({', '.join(self.release.architectures)})")
        return replace(self, arch=arch,
                       loaded=replace(self.release, architectures=(arch,)))

    @property
    def target_arch(self) -> str:
        """The architecture a per-architecture stage builds: the run's first (its only one
        once narrowed with `for_arch` or `--arch`)."""
        return self.release.architectures[0]
