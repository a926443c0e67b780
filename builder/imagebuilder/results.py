"""A finished compose's artifact: downloaded, and published the way a local build would be.

- commit types (edge-commit, iot-commit): the tarball is kept in DIR/composer/ and its tree
  published as this release's commit (builder.imagebuilder.importer);
- installer types: DIR/installer/NAME.iso, with DIR/installer/NAME.json naming the commit
  it installs and that commit's (release) version.
Every compose started here leaves a record, DIR/composer/NAME-UUID.json: what was asked
(ref, parent, url) and, once fetched, what the service stamped and what was published.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.core.build_layout import Layout
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo, commit_signed
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.imagebuilder.importer import ImportedCommit, Publish, import_commit_tarball
from builder.imagebuilder.request import kind_of
from builder.release.model import Release

if TYPE_CHECKING:
    from builder.imagebuilder.client import ComposeStatus, WeldrClient


@dataclass(frozen=True)
class Target:
    """Where and as what a compose's result is published."""

    build_dir: Path
    image: str
    release: Release
    key: SigningKey | None = None
    expected_ref: str | None = None

    @property
    def layout(self) -> Layout:
        return Layout(self.build_dir)

    @property
    def repo(self) -> Path:
        return self.layout.ostree_repo

    def record_path(self, uuid: str) -> Path:
        return self.layout.composer_record(self.image, uuid)

    @property
    def installer_name(self) -> str:
        """NAME, or NAME-ARCH for a several-architecture release (as the local installer)."""
        return self.release.arch_name(self.image, self.release.architectures[0])


@dataclass(frozen=True)
class ComposeResult:
    uuid: str
    compose_type: str
    artifact: Path
    size: int
    commit: ImportedCommit | None
    warnings: tuple[str, ...] = ()


def artifact_path(target: Target, compose_type: str, uuid: str) -> Path:
    if kind_of(compose_type) == "installer":
        return target.layout.installer(target.installer_name)
    return target.layout.composer_commit(target.image, uuid)


def read_record(target: Target, uuid: str) -> dict[str, Any]:
    path = target.record_path(uuid)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(target: Target, uuid: str, **fields: Any) -> None:
    path = target.record_path(uuid)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**read_record(target, uuid), **fields, "uuid": uuid}
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def fetch_result(client: WeldrClient, status: ComposeStatus, target: Target,
                 progress: Progress, runner: Runner) -> ComposeResult:
    """Download a FINISHED compose's artifact and publish it."""
    if status.queue_status != "FINISHED":
        raise BuildError(f"composer: compose {status.uuid} is {status.queue_status}, "
                         "not FINISHED; nothing to fetch")
    kind = kind_of(status.compose_type)
    record = read_record(target, status.uuid)
    dest = artifact_path(target, status.compose_type, status.uuid)
    with progress.step(f"download {status.compose_type} {status.uuid}"):
        size = client.download_image(status.uuid, dest, progress)
    if kind == "installer":
        _installer_manifest(target, status, record, size, runner)
        write_record(target, status.uuid, compose_type=status.compose_type,
                     artifact=str(dest))
        return ComposeResult(status.uuid, status.compose_type, dest, size, None)
    publish = Publish(image=target.image, blueprint_version=status.version,
                      version=target.release.evr, timestamp=target.release.source_date_epoch,
                      compose=status.uuid, key=target.key)
    with progress.step(f"publish into {target.repo}"):
        commit = import_commit_tarball(dest, target.repo, runner, progress, publish,
                                       expected_ref=target.expected_ref or record.get("ref"))
        progress.info(f"{commit.ref} -> {commit.commit} (version {commit.version})",
                      ref=commit.ref, commit=commit.commit, version=commit.version)
    write_record(target, status.uuid, compose_type=status.compose_type, artifact=str(dest),
                 ref=commit.ref, commit=commit.commit, parent=commit.parent,
                 version=commit.version, service_commit=commit.service_commit,
                 service_version=commit.service_version)
    return ComposeResult(status.uuid, status.compose_type, dest, size, commit)


def _installer_manifest(target: Target, status: ComposeStatus, record: dict[str, Any],
                        size: int, runner: Runner) -> None:
    """DIR/installer/NAME.json for a service-built ISO: the commit it installs (the one the
    compose's `url` served from DIR/ostree/repo) and that commit's version."""
    ref, commit = record.get("ref"), record.get("payload")
    repo = Repo(target.repo, runner)
    version = signed = None
    if isinstance(commit, str) and repo.exists() and repo.has_commit(commit):
        version = repo.metadata(commit, "version")
        signed = commit_signed(runner, target.repo, commit)
    manifest = {"image": target.image, "ref": ref, "commit": commit, "version": version,
                "signed": signed, "repo": record.get("url"), "sizes": {"iso": size},
                "composer": {"uuid": status.uuid, "compose_type": status.compose_type,
                             "blueprint": status.blueprint,
                             "blueprint_version": status.version}}
    path = target.layout.installer_record(target.installer_name)
    write_atomic(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
