"""What an update changes between two commits: packages added, removed and changed (with
versions), images added, removed and changed (by name, with the old and new digest).

Both sides are read from the commits themselves (builder/publish/contents.py: the rpm
database compose keeps in the tree, and the image store's images.json), so the comparison
works for any two commits of a repository, however they were composed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.publish.contents import CommitContents, InstalledPackage, StoredImage, read_contents


@dataclass(frozen=True)
class PackageChange:
    name: str
    arch: str
    old: str | None   # [epoch:]version-release; None: added
    new: str | None   # None: removed


@dataclass(frozen=True)
class ImageChange:
    name: str         # the image's repository, e.g. quay.io/openshift/router
    old: str | None   # manifest digest; None: added
    new: str | None   # None: removed


@dataclass(frozen=True)
class CommitChanges:
    from_commit: str
    from_version: str | None
    to_commit: str
    to_version: str | None
    packages: tuple[PackageChange, ...]
    images: tuple[ImageChange, ...]

    def packages_by_kind(self) -> dict[str, list[PackageChange]]:
        return _by_kind(self.packages)

    def images_by_kind(self) -> dict[str, list[ImageChange]]:
        return _by_kind(self.images)

    def to_dict(self) -> dict[str, Any]:
        packages = {kind: [_package_json(c) for c in changes]
                    for kind, changes in self.packages_by_kind().items()}
        images = {kind: [_image_json(c) for c in changes]
                  for kind, changes in self.images_by_kind().items()}
        return {"from": {"commit": self.from_commit, "version": self.from_version},
                "to": {"commit": self.to_commit, "version": self.to_version},
                "packages": packages, "images": images}

    def text(self) -> str:
        lines = [f"Changes from {_label(self.from_version, self.from_commit)} to "
                 f"{_label(self.to_version, self.to_commit)}"]
        lines += _section("packages", self.packages_by_kind(), _package_text)
        lines += _section("images", self.images_by_kind(), _image_text)
        return "\n".join(lines)


KINDS = ("added", "removed", "changed")


def _kind(change: PackageChange | ImageChange) -> str:
    return "added" if change.old is None else "removed" if change.new is None else "changed"


def _by_kind(changes: Iterable[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    for change in changes:
        grouped[_kind(change)].append(change)
    return grouped


def _package_json(change: PackageChange) -> dict[str, Any]:
    if change.old is None or change.new is None:
        return {"name": change.name, "arch": change.arch, "version": change.old or change.new}
    return asdict(change)


def _image_json(change: ImageChange) -> dict[str, Any]:
    if change.old is None or change.new is None:
        return {"name": change.name, "digest": change.old or change.new}
    return asdict(change)


def _label(version: str | None, commit: str) -> str:
    return f"{version or '?'} ({commit[:12]})"


def _package_text(change: PackageChange) -> tuple[str, str]:
    versions = (f"{change.old} -> {change.new}" if change.old and change.new
                else change.old or change.new or "")
    return f"{change.name}.{change.arch}", versions


def _image_text(change: ImageChange) -> tuple[str, str]:
    digests = (f"{change.old} -> {change.new}" if change.old and change.new
               else change.old or change.new or "")
    return change.name, digests


def _section(title: str, grouped: dict[str, list[Any]], show: Any) -> list[str]:
    counts = ", ".join(f"{len(grouped[kind])} {kind}" for kind in KINDS)
    lines = [f"  {title}: {counts}"]
    rows = [(kind, *show(change)) for kind in KINDS for change in grouped[kind]]
    width = max((len(name) for _, name, _ in rows), default=0)
    lines += [f"    {kind:<8} {name:<{width}}  {what}" for kind, name, what in rows]
    return lines


def compare(old: CommitContents, new: CommitContents) -> CommitChanges:
    return CommitChanges(old.commit, old.version, new.commit, new.version,
                         package_changes(old.packages, new.packages),
                         image_changes(old.images, new.images))


def commit_changes(repo: Repo, from_commit: str, to_commit: str) -> CommitChanges:
    return compare(read_contents(repo, from_commit), read_contents(repo, to_commit))


def changes_to(repo: Repo, head: str, sources: Iterable[str],
               warn: Callable[[str], None]) -> tuple[CommitChanges, ...]:
    """What updating from each of `sources` to `head` changes (head is read once). A commit
    whose contents cannot be read costs the report its changes, with a warning, never the
    deltas."""
    try:
        new = read_contents(repo, head)
        return tuple(compare(read_contents(repo, source), new) for source in sources)
    except BuildError as exc:
        warn(f"the update report lists no package or image changes: {exc.message}")
        return ()


def package_changes(old: Iterable[InstalledPackage],
                    new: Iterable[InstalledPackage]) -> tuple[PackageChange, ...]:
    """By name and arch; a name installed in several versions (kernels) compares as the set
    of its versions."""
    before, after = _versions(old), _versions(new)
    changes = []
    for key in sorted(before.keys() | after.keys()):
        was, now = before.get(key), after.get(key)
        if was != now:
            changes.append(PackageChange(key[0], key[1], _join(was), _join(now)))
    return tuple(changes)


def _versions(packages: Iterable[InstalledPackage]) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pkg in packages:
        found[(pkg.name, pkg.arch)].append(pkg.evr)
    return {key: sorted(values) for key, values in found.items()}


def _join(values: list[str] | None) -> str | None:
    return ", ".join(values) if values else None


def image_changes(old: Iterable[StoredImage],
                  new: Iterable[StoredImage]) -> tuple[ImageChange, ...]:
    """By repository: another image of the same repository is a changed image. What is
    compared is the image stored for the commit's architecture, so a new manifest list
    whose image for this architecture is the same is no change; the digests reported are
    the pinned ones (what release.yaml and the blueprint name)."""
    before, after = _by_repository(old), _by_repository(new)
    return tuple(
        ImageChange(name, _join(_pinned(before.get(name))), _join(_pinned(after.get(name))))
        for name in sorted(before.keys() | after.keys())
        if _stored(before.get(name)) != _stored(after.get(name)))


def _by_repository(images: Iterable[StoredImage]) -> dict[str, list[StoredImage]]:
    found: dict[str, list[StoredImage]] = defaultdict(list)
    for image in images:
        found[image.repository].append(image)
    return found


def _pinned(images: list[StoredImage] | None) -> list[str] | None:
    return sorted(image.digest for image in images) if images else None


def _stored(images: list[StoredImage] | None) -> list[str] | None:
    return sorted(image.content for image in images) if images else None
