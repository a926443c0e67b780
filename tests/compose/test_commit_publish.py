"""How a compose publishes its commit and decides it has nothing to do, on small commits made
with the real ostree and gpg (seconds, no RPMs): the ref moves only after the commit is in
the published repository and signed; a run stopped at any point leaves the ref where it was
and a rerun completes; unchanged content is not published again; a compose of the same
inputs is skipped only when every input is the same. The whole compose, killed for real at
every stage, is tests/compose/test_commit.py's (minutes); these are what mutation testing
runs against builder/compose/commit.py (docs/testing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from builder.compose.base import BaseCommit
from builder.compose.commit import (
    STAGES,
    ComposeOptions,
    _already_composed,
    _check_not_older,
    _check_same_image,
    _Job,
    _publish,
    _publish_summary,
    _record_inputs,
    _why_compose,
    compose_identity,
    compose_inputs,
    compose_lock,
    kill_at,
    ostree_dirs,
)
from builder.compose.inputs import ComposeInputs, Customizations
from builder.context import Context
from builder.core.children import gpg_agents
from builder.core.errors import BuildError
from builder.core.ostree import ostree_timestamp, signed_by
from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.core.steps import builder_code_digest
from tests.support.cli import PROJECT_ROOT, RELEASE
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration

REF = "microshift/x86_64/tiny"


class Stopped(Exception):
    """What the test checkpoint raises: the compose stops there, as if killed."""


def stop_at(stage: str) -> Callable[[str], None]:
    def checkpoint(name: str) -> None:
        if name == stage:
            raise Stopped(stage)
    return checkpoint


def make_job(root: Path, key: SigningKey | None = None, *, release: Path = RELEASE,
             **options: object) -> _Job:
    ctx = Context(root / "build", release)
    archive, build_repo = ostree_dirs(ctx)
    archive.init("archive")
    build_repo.init("bare")
    blueprint, lock = root / "tiny.toml", root / "tiny.x86_64.lock.json"
    if not blueprint.exists():
        blueprint.write_text('name = "tiny"\nversion = "1.0.0"\n')
        lock.write_text('{"packages": []}\n')
    inputs = ComposeInputs("tiny", "1.0.0", blueprint, lock, (), (), Customizations())
    work = root / "work"
    work.mkdir(exist_ok=True)
    return _Job(ctx, inputs, REF, ComposeOptions(key=key, **options),  # type: ignore[arg-type]
                archive, build_repo, work)


def commit(job: _Job, text: str, parent: str | None, *, version: str | None = None,
           image: str = "tiny", timestamp: int | None = None) -> str:
    """A commit of a one-file tree in the private build repo, as a compose makes it."""
    tree = job.work / f"tree-{len(list(job.work.iterdir()))}"
    (tree / "usr" / "etc").mkdir(parents=True)
    (tree / "usr" / "etc" / "motd").write_text(text)
    return job.build_repo.commit(
        tree, subject=text, timestamp=timestamp or job.ctx.release.source_date_epoch,
        parent=parent,
        bind_ref=job.ref, metadata={"version": version or job.ctx.release.evr,
                                    "microshift.image": image})


def summary_head(job: _Job) -> str | None:
    """The commit the published summary (what a pulling device follows) names for the ref."""
    view = subprocess.run(["ostree", f"--repo={job.archive.path}", "summary", "--view"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    for index, line in enumerate(view):
        if line == f"* {job.ref}":
            return view[index + 2].strip()
    return None


def agents(home: Path) -> list[int]:
    return [agent.pid for agent in gpg_agents() if agent.homedir == home]


def test_publish_copies_and_signs_the_commit_then_moves_the_ref(
        tmp_path: Path, release_key: ReleaseKey, capfd: pytest.CaptureFixture[str]) -> None:
    signing, public = release_key
    job = make_job(tmp_path, signing)
    first = commit(job, "release 1\n", None)
    assert _publish(job, first, None) is True
    assert f"==> publish to {job.archive.path}\n" in capfd.readouterr().err
    assert agents(signing.homedir) == []  # no gpg-agent outlives the step
    assert job.archive.rev_parse(REF) == first and summary_head(job) == first
    assert signed_by(Runner(), job.archive.path, REF, public)
    assert (job.archive.path / "summary.sig").is_file()
    second = commit(job, "release 2\n", first)
    assert _publish(job, second, first) is True
    assert job.archive.rev_parse(REF) == second and summary_head(job) == second
    assert job.archive.parent(second) == first
    assert signed_by(Runner(), job.archive.path, REF, public)
    job.archive.fsck()


def test_an_unsigned_publish_is_not_signed(tmp_path: Path, release_key: ReleaseKey) -> None:
    job = make_job(tmp_path)
    first = commit(job, "release 1\n", None)
    assert _publish(job, first, None) is True
    assert job.archive.rev_parse(REF) == first
    assert not signed_by(Runner(), job.archive.path, REF, release_key[1])
    assert not (job.archive.path / "summary.sig").exists()


@pytest.mark.parametrize("stage", ["pulled", "signed", "ref-moved"])
def test_a_publish_stopped_anywhere_keeps_the_ref_until_the_commit_is_signed_and_reruns(
        stage: str, tmp_path: Path, release_key: ReleaseKey) -> None:
    signing, public = release_key
    job = make_job(tmp_path, signing)
    first = commit(job, "release 1\n", None)
    _publish(job, first, None)
    second = commit(job, "release 2\n", first)
    stopping = replace(job, options=replace(job.options, checkpoint=stop_at(stage)))
    with pytest.raises(Stopped):
        _publish(stopping, second, first)
    job.archive.fsck()
    # A device pulling now gets a commit that is complete and signed, old or new.
    assert job.archive.rev_parse(REF) == (second if stage == "ref-moved" else first)
    assert signed_by(Runner(), job.archive.path, REF, public)
    assert summary_head(job) == first  # regenerated only after the ref moved
    assert _publish(job, second, first) is True
    assert job.archive.rev_parse(REF) == second and summary_head(job) == second
    assert signed_by(Runner(), job.archive.path, REF, public)


def test_the_checkpoints_come_in_the_order_of_the_stages(tmp_path: Path,
                                                         release_key: ReleaseKey) -> None:
    seen: list[str] = []
    job = make_job(tmp_path, release_key[0], checkpoint=seen.append)
    first = commit(job, "release 1\n", None)
    _publish(job, first, None)
    assert seen == ["pulled", "signed", "ref-moved"]
    assert seen == [s for s in STAGES if s in seen]


def test_unchanged_content_and_version_publish_nothing_but_the_summary(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    first = commit(job, "release 1\n", None)
    _publish(job, first, None)
    (job.archive.path / "summary").unlink()
    again = commit(job, "release 1\n", first)  # same tree and version, another commit
    assert again != first
    assert _publish(job, again, first) is False
    assert job.archive.rev_parse(REF) == first and not job.archive.has_commit(again)
    assert summary_head(job) == first


@pytest.mark.parametrize("change", ["content", "version"])
def test_a_new_version_or_new_content_is_published(change: str, tmp_path: Path) -> None:
    job = make_job(tmp_path)
    # The head is the previous release's (or, for new content, this release's).
    first = commit(job, "release 1\n", None,
                   version="4.14.2-0" if change == "version" else None)
    _publish(job, first, None)
    second = commit(job, "release 1\n" if change == "version" else "release 2\n", first)
    assert _publish(job, second, first) is True
    assert job.archive.rev_parse(REF) == second


def test_the_summary_is_refreshed_and_signed_by_a_compose_that_changes_nothing(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    job = make_job(tmp_path, release_key[0])
    first = commit(job, "release 1\n", None)
    _publish(job, first, None)
    second = commit(job, "release 2\n", first)
    job.archive.pull_local(job.build_repo.path, second)
    job.archive.set_ref(REF, second)  # as a compose killed right after moving the ref
    (job.archive.path / "summary.sig").unlink()
    assert summary_head(job) == first
    _publish_summary(job)
    assert summary_head(job) == second
    assert agents(release_key[0].homedir) == []
    # A device that verifies summaries accepts it: the regenerated summary is signed.
    subprocess.run(["ostree", f"--repo={tmp_path / 'device'}", "init", "--mode=archive"],
                   check=True)
    subprocess.run(["ostree", f"--repo={tmp_path / 'device'}", "remote", "add",
                    "--set=gpg-verify-summary=true", f"--set=gpgkeypath={release_key[1]}", "origin",
                    f"file://{job.archive.path}"], check=True)
    refs = subprocess.run(["ostree", f"--repo={tmp_path / 'device'}", "remote", "refs",
                           "origin"], capture_output=True, text=True, check=False)
    assert refs.returncode == 0, refs.stderr
    assert refs.stdout.split() == [f"origin:{REF}"]


def test_a_ref_of_another_image_is_refused_unless_named_on_purpose(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    other = commit(job, "other image\n", None, image="microshift-minimal")
    _publish(job, other, None)
    with pytest.raises(BuildError) as refused:
        _check_same_image(job, other)
    assert refused.value.message == (f"ref {REF} holds microshift-minimal commits; composing "
                                  "tiny onto it would switch every device following it to "
                                  "another profile")
    assert refused.value.hint == ("give each image its own ref (release.yaml ostree.ref with "
                                  "{image}), or pass --ref explicitly to do it on purpose")
    _check_same_image(replace(job, explicit_ref=True), other)
    _check_same_image(job, None)
    same = commit(job, "same image\n", other)
    _publish(job, same, other)
    _check_same_image(job, same)


def test_a_head_dated_after_the_release_is_followed_only_on_purpose(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    epoch = job.ctx.release.source_date_epoch
    same_day = commit(job, "same date\n", None)
    _publish(job, same_day, None)
    _check_not_older(job, same_day)  # a recompose of this release (e.g. a changed builder)
    _check_not_older(job, None)
    later = commit(job, "a day later\n", same_day, version="4.15.0-1", timestamp=epoch + 1)
    _publish(job, later, same_day)
    with pytest.raises(BuildError) as refused:
        _check_not_older(job, later)
    assert refused.value.message == (
        f"ref {REF} holds 4.15.0-1 dated {ostree_timestamp(epoch + 1)}; release "
        f"{job.ctx.release.evr} is dated {ostree_timestamp(epoch)} (source_date_epoch), "
        "older: devices would refuse it as a downgrade")
    assert refused.value.hint == ("to roll back on purpose, release the old content with a "
                                  "later source_date_epoch, or pass --allow-older for devices "
                                  "set to allow_downgrade: true")
    _check_not_older(replace(job, options=replace(job.options, allow_older=True)), later)
    # A head from elsewhere, without a version: named by its checksum.
    tree = job.work / "unversioned"
    (tree / "usr" / "etc").mkdir(parents=True)
    unversioned = job.build_repo.commit(tree, subject="no version", timestamp=epoch + 60,
                                        parent=later, bind_ref=job.ref, metadata={})
    _publish(job, unversioned, later)
    with pytest.raises(BuildError, match=rf"^ref {REF} holds {unversioned[:12]} dated "):
        _check_not_older(job, unversioned)


BASE = BaseCommit("a" * 64, True, "SAMPLE base")


def test_the_inputs_are_named_and_their_identity_changes_with_every_one(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    inputs = compose_inputs(job, BASE, code="builder code")
    assert inputs == {"blueprint": sha256(job.inputs.blueprint_path),
                      "lock": sha256(job.inputs.lock_path), "base": "a" * 64,
                      "release": "4.14.2-1", "epoch": 1700000000, "arch": "x86_64",
                      "ref": REF, "builder": "builder code"}
    identity = compose_identity(inputs)
    assert compose_identity(compose_inputs(make_job(tmp_path), BASE, "builder code")) == identity
    assert compose_identity(compose_inputs(job, replace(BASE, description="other words"),
                                           "builder code")) == identity
    for name in inputs:
        assert compose_identity({**inputs, name: "another"}) != identity, name
    assert compose_inputs(job, BASE)["builder"] == builder_code_digest()


def test_every_input_is_read_from_where_it_lives(tmp_path: Path) -> None:
    two = _release(tmp_path / "two", architectures=["x86_64", "aarch64"], release="2",
                   source_date_epoch=1700000001)
    job = make_job(tmp_path, release=two)
    arm = replace(job, ctx=job.ctx.for_arch("aarch64"), ref="microshift/aarch64/tiny")
    assert {name: value for name, value in compose_inputs(arm, BASE).items()
            if name in ("release", "epoch", "arch", "ref")} == {
        "release": "4.14.2-2", "epoch": 1700000001, "arch": "aarch64",
        "ref": "microshift/aarch64/tiny"}


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _release(directory: Path, **fields: object) -> Path:
    data = yaml.safe_load(RELEASE.read_text())
    data.update(fields)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "release.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_compose_is_skipped_only_for_the_recorded_head_and_inputs(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    head = "c" * 64
    inputs = compose_inputs(job, BASE, "builder code")
    identity = compose_identity(inputs)
    assert not _already_composed(job, head, identity)  # nothing recorded yet
    _record_inputs(job, head, inputs)
    record = job.ctx.layout.compose_inputs(REF)
    assert job.archive.path not in record.parents  # commits stay a function of their content
    assert json.loads(record.read_text()) == {"commit": head, "identity": identity,
                                              "inputs": inputs}
    assert _already_composed(job, head, identity)
    assert not _already_composed(job, None, identity)  # the ref is gone
    assert not _already_composed(job, "e" * 64, identity)  # the ref moved since
    assert not _already_composed(job, head, "f" * 64)  # an input changed
    assert not _already_composed(replace(job, ref="microshift/x86_64/other"), head, identity)
    for damaged in ("", "{", "[]", "null", json.dumps({"commit": head, "identity": identity}),
                    json.dumps({"identity": identity, "inputs": inputs}),
                    json.dumps({"commit": head, "inputs": inputs}),
                    json.dumps({"commit": head, "identity": identity, "inputs": 3})):
        record.write_text(damaged)
        assert not _already_composed(job, head, identity), damaged


def test_the_log_says_why_a_compose_runs(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    head = "c" * 64
    inputs = compose_inputs(job, BASE, "builder code")
    assert _why_compose(job, None, inputs) == f"{REF} has no commit yet"
    assert _why_compose(job, head, inputs) == (f"no record of what {REF}'s head was composed "
                                               "from")
    _record_inputs(job, head, inputs)
    record = job.ctx.layout.compose_inputs(REF)
    assert _why_compose(job, "e" * 64, inputs) == (f"{REF} has moved since the compose "
                                                   f"recorded in {record}")
    newer = {**inputs, "lock": "0" * 64, "builder": "newer code"}
    assert _why_compose(job, head, newer) == "changed since the last compose: lock, builder"


def test_one_compose_at_a_time_in_a_fresh_work_directory(tmp_path: Path) -> None:
    ctx = Context(tmp_path / "build", RELEASE)
    stale = ctx.layout.ostree / "work" / "tree" / "left-by-a-killed-compose"
    stale.parent.mkdir(parents=True)
    stale.write_text("x")
    old = os.umask(0o077)
    try:
        with compose_lock(ctx) as work:
            assert work == ctx.layout.ostree / "work" and list(work.iterdir()) == []
            assert os.umask(0o022) == 0o022  # files the compose creates get 0644 / 0755
            with pytest.raises(BuildError) as busy, compose_lock(ctx):
                pass
            assert str(busy.value) == (f"another compose is running in {ctx.layout.ostree} "
                                       "(hint: wait for it to finish)")
        assert not work.exists()
        assert os.umask(0o077) == 0o077  # the caller's umask is back
        with compose_lock(ctx):  # free again
            pass
    finally:
        os.umask(old)


def test_kill_at_names_the_stages_and_kills_only_at_its_own(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as unknown:
        kill_at("published")
    assert str(unknown.value) == ("MICROSHIFT_BUILDER_TEST_KILL_AT='published': unknown stage; "
                                  "allowed: " + ", ".join(STAGES))
    script = ("from builder.compose.commit import kill_at\n"
              "checkpoint = kill_at('signed')\n"
              "checkpoint('pulled'); print('after pulled', flush=True)\n"
              "checkpoint('signed'); print('after signed', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == -9 and proc.stdout == "after pulled\n"
