"""`publish`: the repository uploaded so that devices never see a ref before its objects, with
SBOMs and update reports beside it; merging the build directories of a CI matrix."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.publish.upload import PublishOptions, plan, publish, stamp_summary
from tests.support import requires
from tests.support.cli import RELEASE
from tests.support.keys import make_release_key
from tests.support.ostree import (
    IMAGE,
    ComposedPair,
    cli,
    copy_build,
    device_repo,
    head,
    ostree,
    serve,
)


def flat(phases: list[tuple[str, list[list[str]]]]) -> list[tuple[str, str]]:
    return [(phase, " ".join(argv)) for phase, commands in phases for argv in commands]


def fake_repo(root: Path) -> Path:
    repo = root / "repo"
    for rel in ("config", "summary", "summary.sig", "objects/ab/cd.commit", "deltas/x/0",
                "delta-indexes/ab/cd.index", "refs/heads/r"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x")
    (root / "extras").mkdir()
    return repo


def test_s3_upload_puts_objects_first_and_refs_and_summary_last(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path)
    steps = flat(plan("s3://bucket/edge/", repo, tmp_path / "extras"))
    assert [phase for phase, _ in steps] == sorted(
        (phase for phase, _ in steps), key=["objects", "metadata", "refs"].index)
    commands = [command for _, command in steps]
    objects = next(i for i, c in enumerate(commands) if "repo/objects" in c)
    assert "--exclude *.commitmeta" in commands[objects]  # signatures are not content
    refs = next(i for i, c in enumerate(commands) if "repo/refs" in c)
    summary = commands.index(f"aws s3 cp --no-progress --only-show-errors {repo}/summary "
                             "s3://bucket/edge/repo/summary")
    signature = commands.index(f"aws s3 cp --no-progress --only-show-errors {repo}/summary.sig "
                               "s3://bucket/edge/repo/summary.sig")
    metadata = [i for i, (phase, _) in enumerate(steps) if phase == "metadata"]
    assert objects < min(metadata) < max(metadata) < refs < summary < signature
    assert all("delete" not in c for c in commands)  # never remove what devices may fetch


def test_rsync_upload_phases_filter_what_each_may_touch(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path)
    phases = dict(plan(str(tmp_path / "target"), repo, tmp_path / "extras"))
    [objects] = phases["objects"]
    assert "--ignore-existing" in objects and objects.index("--exclude=*.commitmeta") < \
        objects.index("--include=/objects/***")
    assert not any("summary" in arg or "refs" in arg for arg in objects)
    assert not any("summary" in arg or "refs" in arg for argv in phases["metadata"]
                   for arg in argv)
    [refs, indexes] = phases["refs"]
    assert "--delay-updates" in refs and "--include=/summary" in refs
    # The devices' update indexes name the new commits: they go last, never in metadata.
    [_, extras] = phases["metadata"]
    assert "--exclude=index.json" in extras and "--exclude=index.json.sig" in extras
    assert "--delay-updates" in indexes and indexes[-3:-2] == ["--exclude=*"]
    assert {"--include=index.json", "--include=index.json.sig"} <= set(indexes)
    assert not any("--delete" in arg for argv in phases.values() for c in argv for arg in c)


def integration(test: Any) -> Any:
    marked = requires.root_only("compose runs rpm --root and keeps ownership")(test)
    return pytest.mark.integration(marked)


def released_build(pair: ComposedPair, dest: Path, commit: str) -> Path:
    """A copy of the pair's build dir whose ref is at `commit` (a release in the past)."""
    build = copy_build(pair.build_dir, dest)
    repo = build / "ostree" / "repo"
    ostree(f"--repo={repo}", "refs", "--force", f"--create={pair.ref}", commit)
    gpg = build / "gpg"
    listing = subprocess.run(["gpg", "--homedir", str(gpg), "--with-colons",
                              "--list-secret-keys"], capture_output=True, text=True,
                             check=True).stdout
    key = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    ostree(f"--repo={repo}", "summary", "-u", f"--gpg-sign={key}", f"--gpg-homedir={gpg}")
    subprocess.run(["gpgconf", "--homedir", str(gpg), "--kill", "gpg-agent"], check=False)
    assert cli("--release", pair.release2, "sbom", "--image", IMAGE, "--build-dir", build) == 0
    return build


class Interrupted(Exception):
    pass


def interrupt_after(wanted: str) -> Any:
    def checkpoint(phase: str) -> None:
        if phase == wanted:
            raise Interrupted(phase)
    return checkpoint


def consistent_statement(updates: Path) -> bool:
    """What a device checks: the signed statement names the index being served."""
    stamp = json.loads((updates / "timestamp.json").read_text())
    return stamp["index_sha256"] == hashlib.sha256((updates / "index.json").read_bytes()
                                                   ).hexdigest()


@integration
@pytest.mark.parametrize("phase", ["objects", "metadata"])
def test_publish_interrupted_before_the_refs_keeps_devices_on_the_old_release(
        composed_pair: ComposedPair, tmp_path: Path, phase: str) -> None:
    pair, target = composed_pair, tmp_path / "target"
    old = released_build(pair, tmp_path / "old", pair.commit1)
    assert cli("--release", pair.release2, "publish", "--build-dir", old, "--to", target) == 0
    new = released_build(pair, tmp_path / "new", pair.commit2)
    updates = target / "updates" / pair.ref
    (new / "deltas" / pair.ref / "index.json").write_text(
        (new / "deltas" / pair.ref / "index.json").read_text() + " ")  # this publish's index
    old_index = (updates / "index.json").read_bytes()
    ctx = Context(build_dir=new, release_path=pair.release2, progress=Progress())
    with pytest.raises(Interrupted):
        publish(ctx, PublishOptions(target=str(target), checkpoint=interrupt_after(phase)))
    published = target / "repo"
    # Every object of the new commit is there, yet the refs and summary still name the old.
    assert head(published, pair.ref) == pair.commit1
    ostree(f"--repo={published}", "fsck")
    assert ostree(f"--repo={published}", "ls", pair.commit2, "/usr/bin/microshift").returncode == 0
    if phase == "metadata":
        assert (target / "sbom" / pair.ref / f"{pair.commit2}.spdx.json").is_file()
        # The delta files are up, but the new index that tells devices' updaters about them
        # is not: it goes with the refs.
        assert any(updates.glob(f"{pair.commit1}-{pair.commit2}.delta"))
    assert (updates / "index.json").read_bytes() == old_index
    assert consistent_statement(updates)
    with serve(published) as (url, _):
        device = device_repo(tmp_path / "device", url, pair.public_key)
        ostree(f"--repo={device}", "pull", "origin", pair.ref)
        assert head(device, f"origin:{pair.ref}") == pair.commit1
        # The rerun completes the publish; the device now updates, over the delta.
        assert cli("--release", pair.release2, "publish", "--build-dir", new, "--to",
                   target) == 0
        pulled = ostree(f"--repo={device}", "pull", "origin", pair.ref)
    assert "delta parts" in pulled.stdout
    assert head(device, f"origin:{pair.ref}") == pair.commit2
    assert (target / "sbom" / pair.ref / f"{pair.commit1}.spdx.json").is_file()  # kept
    assert (target / "updates" / pair.ref / "report.txt").is_file()
    assert (updates / "index.json").read_bytes() == \
        (new / "deltas" / pair.ref / "index.json").read_bytes() != old_index
    assert (updates / "index.json.sig").is_file() and consistent_statement(updates)
    # Publishing what is already there writes nothing but the signed statements that the
    # indexes are current, dated now (builder/updater/freshness.py).
    before = snapshot(target)
    assert cli("--release", pair.release2, "publish", "--build-dir", new, "--to", target,
               "--index-validity", "2") == 0
    after = snapshot(target)
    changed = {Path(p).name for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed <= {"timestamp.json", "timestamp.json.sig"}
    stamp = json.loads((updates / "timestamp.json").read_text())
    assert stamp["ref"] == pair.ref and stamp["expires"] - stamp["issued"] == 2 * 86400
    assert abs(stamp["issued"] - time.time()) < 600
    assert stamp["index_sha256"] == hashlib.sha256((updates / "index.json").read_bytes()
                                                   ).hexdigest()
    assert (updates / "timestamp.json.sig").is_file()


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


@integration
def test_a_summary_made_before_the_published_one_still_reaches_devices(
        composed_pair: ComposedPair, tmp_path: Path) -> None:
    """ostree asks for summary.sig and summary with If-Modified-Since; a web server (here
    Python's, as nginx) answers 304 when the file is not newer than the device's copy. The
    new release's summary was made earlier than the published one (a parallel CI job):
    published with its own date, devices would stay on the old release."""
    pair, target = composed_pair, tmp_path / "target"
    old = released_build(pair, tmp_path / "old", pair.commit1)
    new = released_build(pair, tmp_path / "new", pair.commit2)
    made = (old / "ostree" / "repo" / "summary.sig").stat().st_mtime - 60
    for name in ("summary", "summary.sig"):
        os.utime(new / "ostree" / "repo" / name, (made, made))
    assert cli("--release", pair.release2, "publish", "--build-dir", old, "--to", target) == 0
    with serve(target / "repo") as (url, _):
        device = device_repo(tmp_path / "device", url, pair.public_key)
        ostree(f"--repo={device}", "pull", "origin", pair.ref)
        assert head(device, f"origin:{pair.ref}") == pair.commit1
        assert cli("--release", pair.release2, "publish", "--build-dir", new, "--to",
                   target) == 0
        ostree(f"--repo={device}", "pull", "origin", pair.ref)
    assert head(device, f"origin:{pair.ref}") == pair.commit2
    dates = {name: (target / "repo" / name).stat().st_mtime for name in ("summary",
                                                                          "summary.sig")}
    assert dates["summary"] == dates["summary.sig"] > made + 60


@integration
def test_publish_merges_the_builds_of_a_matrix_and_refuses_two_builds_of_one_image(
        composed_pair: ComposedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pair, target = composed_pair, tmp_path / "target"
    job = released_build(pair, tmp_path / "job", pair.commit2)
    assert cli("--release", pair.release2, "publish", "--build-dir", tmp_path / "publish",
               "--to", target, "--merge", job) == 0
    assert head(target / "repo", pair.ref) == pair.commit2
    summary = ostree(f"--repo={target / 'repo'}", "summary", "--view").stdout
    assert pair.ref in summary and f"{pair.commit1}-{pair.commit2}" in summary  # deltas merged
    other = released_build(pair, tmp_path / "other", pair.commit1)
    assert cli("--release", pair.release2, "publish", "--build-dir", tmp_path / "again",
               "--to", target, "--merge", job, "--merge", other) == 1
    assert "two builds of one image" in capsys.readouterr().err
    assert head(target / "repo", pair.ref) == pair.commit2


@integration
def test_publish_refuses_commits_the_release_key_did_not_sign(
        composed_pair: ComposedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    homedir = tmp_path / "gnupg"
    fingerprint = make_release_key(homedir)
    try:
        assert cli("--release", composed_pair.release2, "publish", "--build-dir",
                   tmp_path / "publish", "--to", tmp_path / "target", "--merge",
                   composed_pair.build_dir, "--gpg-homedir", homedir, "--gpg-key",
                   fingerprint) == 1
    finally:
        subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"],
                       check=False)
    assert f"is not signed by {fingerprint}" in capsys.readouterr().err
    assert not (tmp_path / "target").exists()


def test_publish_without_refs_says_what_to_do(tmp_path: Path) -> None:
    ctx = Context(build_dir=tmp_path / "empty", release_path=Path("release.yaml"),
                  progress=Progress())
    with pytest.raises(BuildError, match="no refs to publish"):
        publish(ctx, PublishOptions(target=str(tmp_path / "target")))


def _summary(repo: Path, signature: bytes, date: float) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    for name, data in (("summary", b"summary of " + signature), ("summary.sig", signature)):
        (repo / name).write_bytes(data)
        os.utime(repo / name, (date, date))


def _dates(repo: Path) -> tuple[float, float]:
    return ((repo / "summary").stat().st_mtime, (repo / "summary.sig").stat().st_mtime)


@pytest.mark.parametrize("published_at", [
    None,   # nothing published yet: now
    -3600,  # published an hour ago: now
    3600,   # published "later", by a clock ahead of ours: a second after it
    0,      # published this very second: the next second
])
def test_a_changed_summary_is_dated_after_the_published_one(
        tmp_path: Path, published_at: int | None) -> None:
    now = int(time.time())
    ours, target = tmp_path / "build" / "repo", tmp_path / "target"
    _summary(ours, b"new signature", now - 7200)  # made two hours ago
    if published_at is not None:
        _summary(target / "repo", b"old signature", now + published_at)
    ctx = Context(build_dir=tmp_path / "build", release_path=RELEASE, progress=Progress())
    stamp_summary(ctx, ours, f"{target}/", tmp_path / "scratch" / "published")
    after = int(time.time())
    summary, signature = _dates(ours)
    assert summary == signature
    earliest = now if published_at is None else max(now, now + published_at + 1)
    assert earliest <= signature <= max(earliest, after)


def test_an_unchanged_summary_keeps_the_published_date(tmp_path: Path) -> None:
    ours, target = tmp_path / "build" / "repo", tmp_path / "target"
    published = int(time.time()) - 600
    _summary(ours, b"same signature", published + 300)
    _summary(target / "repo", b"same signature", published)
    ctx = Context(build_dir=tmp_path / "build", release_path=RELEASE, progress=Progress())
    stamp_summary(ctx, ours, str(target), tmp_path / "scratch")
    assert _dates(ours) == (published, published)
    (ours / "summary.sig").unlink()
    os.utime(ours / "summary", (1, 1))
    stamp_summary(ctx, ours, str(target), tmp_path / "scratch")  # no summary.sig: nothing
    assert (ours / "summary").stat().st_mtime == 1
