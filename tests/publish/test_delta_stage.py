"""The delta stage on a small repository of real ostree commits (seconds, no compose): which
update paths get deltas, the summary devices find them through, the signed index of offline
files, superseded files removed, an old delta with fallback entries never kept, a fallback
never published. tests/publish/test_deltas.py runs the same stage on the composed release
pair (minutes); these are what mutation testing runs against builder/publish/deltas.py."""

from __future__ import annotations

import hashlib
import io
import json
import random
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from builder.blueprint.target import image_target
from builder.context import Context
from builder.core.children import gpg_agents
from builder.core.errors import BuildError
from builder.core.ostree import Repo, delta_dir
from builder.core.progress import Progress, human_bytes
from builder.core.runner import Measured, Runner
from builder.core.signing import signature_epoch
from builder.publish.deltas import (
    DeltaOptions,
    DeltaTarget,
    generate_deltas,
    generate_matrix,
)
from builder.publish.report import read_superblock, report_dir
from tests.support.cli import RELEASE
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration

REF = "microshift/x86_64/small"
MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class Chain:
    build: Path
    commits: list[str]  # oldest first
    ref: str = REF

    @property
    def repo(self) -> Path:
        return self.build / "ostree" / "repo"

    def ctx(self, runner: Runner | None = None) -> Context:
        return Context(self.build, RELEASE, runner=runner or Runner())

    def grow(self, *extra: str) -> str:
        """One more commit on the ref (the tool patched again; `extra` new 1.1 MiB files)."""
        release = len(self.commits) + 1
        tool = bytearray(random.Random(1).randbytes(MiB + 100_000))
        for n in range(release):  # each release inserts a few bytes: rollsum territory
            tool[200_000 * (n + 1):200_000 * (n + 1)] = f"release {n}".encode()
        tree = self.build / "trees" / str(release)
        files = {"usr/bin/tool": bytes(tool), "usr/etc/motd": f"release {release}\n".encode(),
                 **{name: random.Random(name).randbytes(MiB + 100_000) for name in extra}}
        for name, data in files.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes(data)
        commit = ostree(self.repo, "commit", f"--branch={self.ref}", f"--tree=dir={tree}",
                        f"--timestamp=2023-01-{release:02d}T00:00:00Z",
                        f"--add-metadata-string=version=4.14.{release}")
        self.commits.append(commit)
        return commit


def ostree(repo: Path, *args: str) -> str:
    return subprocess.run(["ostree", f"--repo={repo}", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_chain(root: Path, commits: int, ref: str = REF) -> Chain:
    chain = Chain(root / "build", [], ref)
    chain.repo.mkdir(parents=True)
    ostree(chain.repo, "init", "--mode=archive")
    for _ in range(commits):
        chain.grow()
    return chain


def deltas(chain: Chain, runner: Runner | None = None, **options: Any) -> dict[str, Any]:
    generate_deltas(chain.ctx(runner), REF, DeltaOptions(**options))
    return json.loads((report_dir(chain.build, REF) / "report.json").read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("generator", ["builder", "ostree"])
def test_deltas_from_the_previous_commits_and_from_scratch(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], generator: str) -> None:
    chain = make_chain(tmp_path, 4)
    c1, c2, c3, c4 = chain.commits
    report = deltas(chain, from_count=2, generator=generator)
    err = capfd.readouterr().err
    for path in report["paths"]:
        knobs = path["knobs"]
        assert knobs["generator"] == generator
        label = f"{(path['from_commit'] or 'empty')[:12]} -> {c4[:12]}"
        if generator == "builder":
            pieces = path["pieces"]
            assert pieces["made"] + pieces["shared"] + pieces["cached"] == \
                pieces["parts"] == path["delta_parts"]
            assert f"    {label}: " in err and f"{pieces['parts']} parts: " in err
            continue
        assert path["pieces"] is None
        assert (f"    {label}: generating (--min-fallback-size=0 --max-bsdiff-size="
                f"{knobs['max_bsdiff_size_mb']} --max-chunk-size={knobs['max_chunk_size_mb']}; "
                "estimated peak ") in err
    assert (report["ref"], report["to_commit"], report["to_version"]) == (REF, c4, "4.14.4")
    assert [p["from_commit"] for p in report["paths"]] == [c3, c2, None]
    assert [p["from_version"] for p in report["paths"]] == ["4.14.3", "4.14.2", None]
    assert all(p["generated"] and p["fallback_objects"] == 0 for p in report["paths"])
    listed = ostree(chain.repo, "static-delta", "list").split()
    assert sorted(listed) == sorted([f"{c3}-{c4}", f"{c2}-{c4}", c4])
    # Devices find deltas through the summary, which names the new head.
    summary = ostree(chain.repo, "summary", "--view")
    assert f"{c3}-{c4}" in summary and f"{c2}-{c4}" in summary and c4 in summary
    assert c1 not in summary


def test_the_release_says_from_how_many_commits(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 5)
    report = deltas(chain)  # the sample release.yaml: ostree.deltas_from = 3
    assert [p["from_commit"] for p in report["paths"]] == [*reversed(chain.commits[1:4]), None]


def test_the_index_lists_every_offline_file_and_is_signed(tmp_path: Path,
                                                          release_key: ReleaseKey) -> None:
    chain = make_chain(tmp_path, 3)
    c1, c2, c3 = chain.commits
    deltas(chain, key=release_key[0])
    out = report_dir(chain.build, REF)
    index = json.loads((out / "index.json").read_text())
    assert (index["ref"], index["to_commit"], index["to_version"]) == (REF, c3, "4.14.3")
    files = {entry["file"]: entry for entry in index["files"]}
    assert sorted(files) == sorted([f"{c2}-{c3}.delta", f"{c1}-{c3}.delta",
                                    f"empty-{c3}.delta"])
    for name, entry in files.items():
        assert (entry["bytes"], entry["sha256"]) == ((out / name).stat().st_size,
                                                     sha256(out / name)), name
        assert entry["to_commit"] == c3 and entry["to_version"] == "4.14.3"
    report = json.loads((out / "report.json").read_text())
    assert {p["offline_file"]: (p["delta_parts"], p["offline_bytes"], p["offline_sha256"])
            for p in report["paths"]} == \
        {name: (entry["parts"], entry["bytes"], entry["sha256"]) for name, entry in files.items()}
    assert (files[f"{c2}-{c3}.delta"]["from_commit"],
            files[f"{c2}-{c3}.delta"]["from_version"]) == (c2, "4.14.2")
    assert files[f"empty-{c3}.delta"]["from_commit"] is None
    verify = tmp_path / "verify"
    verify.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(verify), "--batch", "--import", str(release_key[1])],
                   check=True, capture_output=True)
    checked = subprocess.run(["gpg", "--homedir", str(verify), "--batch", "--status-fd", "1",
                              "--verify", str(out / "index.json.sig"), str(out / "index.json")],
                             capture_output=True, text=True, check=False)
    subprocess.run(["gpgconf", "--homedir", str(verify), "--kill", "gpg-agent"], check=False)
    assert checked.returncode == 0 and "[GNUPG:] VALIDSIG" in checked.stdout
    assert [a for a in gpg_agents() if a.homedir == release_key[0].homedir] == []
    # Dated like the RPMs' and repomd.xml's signatures: the release's epoch, or the key's
    # creation when that is later, never the time of the run.
    validsig = next(line.split() for line in checked.stdout.splitlines()
                    if line.startswith("[GNUPG:] VALIDSIG"))
    assert int(validsig[4]) == signature_epoch(Runner(), release_key[0], 1700000000)
    # A device reading the summary checks its signature too.
    assert (chain.repo / "summary.sig").is_file()


def test_a_signed_rerun_writes_the_same_index_and_signature(
        tmp_path: Path, release_key: ReleaseKey, capfd: pytest.CaptureFixture[str]) -> None:
    chain = make_chain(tmp_path, 2)
    out = report_dir(chain.build, REF)
    deltas(chain, key=release_key[0])
    signed = f"    signed {out / 'index.json'} with {release_key[0].key_id}, current until "
    assert signed in capfd.readouterr().err
    first = {name: (out / name).read_bytes() for name in ("index.json", "index.json.sig")}
    stamp = json.loads((out / "timestamp.json").read_text())
    time.sleep(1.1)  # a signature dated "now" would differ
    deltas(chain, key=release_key[0])
    assert {name: (out / name).read_bytes() for name in first} == first
    # The statement that the index is current is the one thing dated now (a week's worth).
    again = json.loads((out / "timestamp.json").read_text())
    assert again["issued"] > stamp["issued"] and again["index_sha256"] == stamp["index_sha256"]
    assert again["expires"] - again["issued"] == 7 * 24 * 3600


def test_an_unsigned_run_drops_the_old_signature_and_says_so(
        tmp_path: Path, release_key: ReleaseKey, capfd: pytest.CaptureFixture[str]) -> None:
    chain = make_chain(tmp_path, 2)
    deltas(chain, key=release_key[0])
    out = report_dir(chain.build, REF)
    assert (out / "index.json.sig").is_file()
    capfd.readouterr()
    deltas(chain)
    assert not (out / "index.json.sig").exists()  # it signed another index
    assert not (out / "timestamp.json").exists() and not (out / "timestamp.json.sig").exists()
    assert (f"WARNING: {out / 'index.json'} is not signed (no --gpg-key): devices' updaters "
            "refuse an unsigned index") in capfd.readouterr().err


def test_offline_files_to_an_older_head_are_removed(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 2)
    c1, c2 = chain.commits
    deltas(chain)
    out = report_dir(chain.build, REF)
    (out / "notes.txt").write_text("kept: not a delta file\n")
    c3 = chain.grow()
    deltas(chain)
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".delta") == sorted(
        [f"{c2}-{c3}.delta", f"{c1}-{c3}.delta", f"empty-{c3}.delta"])
    assert (out / "notes.txt").is_file()


def test_without_offline_files_no_index_is_written(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 2)
    report = deltas(chain, offline=False)
    out = report_dir(chain.build, REF)
    assert [p["offline_file"] for p in report["paths"]] == [None, None]
    assert not (out / "index.json").exists() and not list(out.glob("*.delta"))


def test_a_rerun_keeps_the_deltas_and_writes_the_same_files(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    chain = make_chain(tmp_path, 2)
    first = deltas(chain)
    out = report_dir(chain.build, REF)
    files = {p.name: p.read_bytes() for p in out.glob("*.delta")}
    capfd.readouterr()
    again = deltas(chain)
    assert [p["generated"] for p in again["paths"]] == [False, False]
    assert [(p["generation_seconds"], p["peak_memory_bytes"]) for p in again["paths"]] == \
        [(None, None), (None, None)]
    # ostree's own time, in hundredths: part of the path's time, never more.
    assert all(0 < p["generation_seconds"] <= p["path_seconds"] and p["peak_memory_bytes"] > 0
               and p["generation_seconds"] == round(p["generation_seconds"], 2)
               for p in first["paths"])
    assert [p["offline_sha256"] for p in again["paths"]] == \
        [p["offline_sha256"] for p in first["paths"]]
    assert {p.name: p.read_bytes() for p in out.glob("*.delta")} == files
    err = capfd.readouterr().err
    label = f"{chain.commits[0][:12]} -> {chain.commits[1][:12]}"
    assert f"{label}: " in err and ", kept the existing delta" in err and "generating" not in err


def test_an_old_delta_with_fallback_entries_is_made_again(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 1)
    c1 = chain.commits[0]
    c2 = chain.grow("usr/share/new.bin")
    # As ostree's defaults (or an older version of this tool) would have made it.
    ostree(chain.repo, "static-delta", "generate", f"--from={c1}", f"--to={c2}",
           "--min-fallback-size=1")
    assert "fallback entries: 1" in ostree(chain.repo, "static-delta", "show", f"{c1}-{c2}")
    report = deltas(chain)
    path = report["paths"][0]
    assert (path["from_commit"], path["generated"], path["fallback_objects"]) == (c1, True, 0)
    assert "fallback entries: 0" in ostree(chain.repo, "static-delta", "show", f"{c1}-{c2}")


class FallbackRunner(Runner):
    """Generates deltas as ostree's defaults would: new objects over 1 MB sent whole."""

    def measured(self, argv: Sequence[Any], **kwargs: Any) -> Measured:
        argv = [("--min-fallback-size=1" if str(a) == "--min-fallback-size=0" else a)
                for a in argv]
        return super().measured(argv, **kwargs)


def test_a_delta_with_fallback_objects_is_an_error_not_published(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 0)
    new = chain.grow("usr/share/new.bin")
    with pytest.raises(BuildError) as failed:
        deltas(chain, FallbackRunner(), generator="ostree")
    assert str(failed.value) == (f"delta empty -> {new[:12]} has 2 fallback objects although "
                                 "it was generated with --min-fallback-size=0")
    out = report_dir(chain.build, REF)
    assert not (out / "index.json").exists() and not list(out.glob("*.delta"))


def test_a_file_of_one_MiB_is_large_and_equal_contents_are_listed_once(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 1)
    tree = chain.build / "trees" / "extra"
    data = random.Random("same").randbytes(MiB)
    for name in ("usr/share/a/same.bin", "usr/share/b/same.bin"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    (tree / "usr/share/small.bin").write_bytes(data[:-1])
    ostree(chain.repo, "commit", f"--branch={REF}", f"--tree=dir={tree}",
           "--add-metadata-string=version=4.14.9")
    update = deltas(chain)["paths"][0]
    assert [(f["path"], f["bytes"]) for f in update["large_files"]] == \
        [("/usr/share/a/same.bin", MiB)]


@pytest.mark.parametrize(("generator", "modified"), [("builder", "bsdiff"),
                                                    ("ostree", "rollsum")])
def test_large_new_files_are_listed_with_their_encoding(tmp_path: Path, generator: str,
                                                        modified: str) -> None:
    chain = make_chain(tmp_path, 1)
    c2 = chain.grow("usr/share/new.bin")
    update, scratch = deltas(chain, generator=generator)["paths"]
    assert update["large_files"] == [
        {"path": "/usr/bin/tool", "bytes": MiB + 100_018, "from_path": "/usr/bin/tool",
         "from_bytes": MiB + 100_009, "encoding": modified},
        {"path": "/usr/share/new.bin", "bytes": MiB + 100_000, "from_path": None,
         "from_bytes": None, "encoding": "whole"}]
    assert scratch["large_files"] == []  # from scratch every file is new: nothing to say
    assert delta_dir(chain.repo, chain.commits[0], c2).is_dir()


def test_refusals_name_the_repository_and_the_ref(tmp_path: Path) -> None:
    empty = Chain(tmp_path / "none", [])
    with pytest.raises(BuildError) as no_repo:
        deltas(empty)
    assert (no_repo.value.message, no_repo.value.hint) == (
        f"no ostree repository at {empty.repo}", "run `python -m builder compose` first")
    chain = make_chain(tmp_path, 1)
    with pytest.raises(BuildError) as no_ref:
        generate_deltas(chain.ctx(), "microshift/x86_64/other", DeltaOptions())
    assert (no_ref.value.message, no_ref.value.hint) == (
        f"{chain.repo} has no ref microshift/x86_64/other", "compose the image first")


@pytest.mark.parametrize("generator", ["builder", "ostree"])
def test_the_report_and_the_log_say_how_the_stage_ran(tmp_path: Path, generator: str) -> None:
    chain = make_chain(tmp_path, 3)
    c1, c2, c3 = chain.commits
    stream = io.StringIO()
    ctx = Context(chain.build, RELEASE, progress=Progress(json_mode=True, stream=stream))
    started = time.monotonic()
    returned = generate_deltas(ctx, REF, DeltaOptions(jobs=1, memory_limit=3 * GiB,
                                                 generator=generator))
    took = time.monotonic() - started
    out = report_dir(chain.build, REF)
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.txt").read_text() == returned.text() + "\n"
    assert (report["repo"], report["jobs"], report["memory_ceiling_bytes"]) == \
        (str(chain.repo), 1, 3 * GiB)
    assert isinstance(report["wall_seconds"], float) and 0 < report["wall_seconds"] <= took
    assert all(isinstance(p["path_seconds"], float) and
               0 < p["path_seconds"] <= report["wall_seconds"] and
               p["path_seconds"] == round(p["path_seconds"], 2) for p in report["paths"])
    # What each update changes (no packages or images in these commits, but both updates).
    assert [(c["from"]["commit"], c["to"]["commit"]) for c in report["changes"]] == \
        [(c2, c3), (c1, c3)]
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    step = f"static deltas to {REF} = {c3[:12]} from 2 previous commits and from scratch"
    assert {"event": "start", "step": step} in [
        {k: e[k] for k in ("event", "step")} for e in events]
    messages = {e["message"]: e for e in events if e["event"] == "info"}
    assert f"3 paths with {generator}'s generator, up to 1 at once, memory ceiling 3.0 GiB" \
        in messages
    size = (out / "report.json").stat().st_size
    assert messages[f"wrote {out / 'report.json'} ({human_bytes(size)})"]["path"] == \
        str(out / "report.json")
    for path in report["paths"]:
        label = f"{(path['from_commit'] or 'empty')[:12]} -> {c3[:12]}"
        how = (f"generated in {path['generation_seconds']:.1f}s, peak "
               f"{human_bytes(path['peak_memory_bytes'])}") if generator == "ostree" else (
            f"{path['pieces']['parts']} parts: {path['pieces']['cached']} from the cache, "
            f"{path['pieces']['made']} made, {path['pieces']['shared']} shared with other paths "
            f"({path['pieces']['made_seconds']:.1f}s of making), ready after "
            f"{path['generation_seconds']:.1f}s")
        line = (f"{label}: {human_bytes(path['delta_bytes'])} in {path['delta_parts']} parts, "
                f"0 fallback objects, {how}")
        assert (messages[line]["path"], messages[line]["bytes"]) == (label, path["delta_bytes"])
    stream.truncate(0)
    generate_deltas(ctx, REF, DeltaOptions())
    kept = report["paths"][0]
    assert (f"{c2[:12]} -> {c3[:12]}: {human_bytes(kept['delta_bytes'])} in "
            f"{kept['delta_parts']} parts, 0 fallback objects, kept the existing delta"
            in stream.getvalue())


def test_a_path_whose_estimate_is_over_the_ceiling_runs_alone_and_says_so(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    chain = make_chain(tmp_path, 2)
    estimates = {p["from_commit"]: p["knobs"]["memory_estimate_bytes"]
                 for p in deltas(chain, offline=False, generator="ostree")["paths"]}
    ceiling = max(estimates.values())
    capfd.readouterr()
    deltas(chain, offline=False, memory_limit=ceiling, generator="ostree")  # every one fits
    assert "estimated peak" not in capfd.readouterr().err
    deltas(chain, offline=False, memory_limit=ceiling - 1, generator="ostree")
    err = capfd.readouterr().err
    for source, estimate in estimates.items():
        assert (f"    {(source or 'empty')[:12]}: estimated peak {human_bytes(estimate)} is "
                "over the ceiling even without bsdiff; it runs alone\n" in err) == \
            (estimate == ceiling)


def test_without_a_ref_the_images_ref_is_updated(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, 2, ref="microshift/x86_64/microshift-full")
    ctx = chain.ctx()
    report = generate_deltas(ctx, image_target(ctx, "microshift-full").ref)
    assert (report.ref, report.to_commit) == (chain.ref, chain.commits[-1])


def test_a_commit_whose_packages_cannot_be_read_costs_the_report_its_changes_only(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    chain = make_chain(tmp_path, 1)
    tree = chain.build / "trees" / "broken"
    (tree / "usr/lib/sysimage/rpm").mkdir(parents=True)
    (tree / "usr/lib/sysimage/rpm/rpmdb.sqlite").write_bytes(b"not a database")
    head = ostree(chain.repo, "commit", f"--branch={REF}", f"--tree=dir={tree}",
                  "--add-metadata-string=version=4.14.9")
    report = deltas(chain)
    assert report["to_commit"] == head and len(report["paths"]) == 2
    assert report["changes"] == []
    assert (f"WARNING: the update report lists no package or image changes: commit "
            f"{head[:12]}: rpm cannot read its rpm database") in capfd.readouterr().err


def test_the_refs_of_a_run_are_one_job_and_share_their_parts(tmp_path: Path) -> None:
    """Two images whose update changes the same files: their parts are made once, for the
    ref that needs them first, and the run's table says so."""
    first = make_chain(tmp_path, 2)
    other = Chain(first.build, [], "microshift/x86_64/other")
    for _ in range(2):
        other.grow("usr/share/other.bin")
    ctx = first.ctx()
    reports = generate_matrix(ctx, [DeltaTarget(ctx, first.ref), DeltaTarget(ctx, other.ref)],
                              DeltaOptions(offline=False))
    assert [(r.ref, r.to_commit) for r in reports] == [(first.ref, first.commits[-1]),
                                                       (other.ref, other.commits[-1])]
    mine, theirs = (r.paths[0].pieces for r in reports)
    assert mine is not None and theirs is not None
    assert mine["shared"] == 0 and theirs["shared"] >= 1  # the tool's bsdiff, made once
    table = json.loads((first.build / "deltas" / "matrix.json").read_text())
    assert [(p["ref"], p["from_commit"]) for p in table["paths"]] == [
        (first.ref, first.commits[0]), (first.ref, None),
        (other.ref, other.commits[0]), (other.ref, None)]
    # Each part file the four deltas hold was made once.
    repo = Repo(first.repo, Runner())
    held = {header.checksum for report in reports for path in report.paths
            for header in read_superblock(repo, path.from_commit, report.to_commit).parts}
    assert len(held) == table["totals"]["parts_made"] < sum(p["parts"] for p in table["paths"])
    for ref in (first.ref, other.ref):
        assert (report_dir(first.build, ref) / "report.json").is_file()
