"""Offline delta files: written from the repository's delta as ostree's own --inline file,
checked before anything touches a device, applied with ostree (issue 11)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core import gvariant
from builder.core.ostree import delta_dir
from builder.core.runner import Runner
from builder.publish.offline import (
    OfflineDeltaError,
    apply_offline,
    check_offline_file,
    index_json,
    offline_name,
    write_offline_file,
)
from tests.support import requires
from tests.support.deltas import (
    NO_FALLBACK,
    TinyDelta,
    ostree,
    scratch_delta,
    signed_delta,
    tiny_delta,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyDelta:
    return tiny_delta(tmp_path_factory.mktemp("tiny") / "tiny", *NO_FALLBACK)


def device_with(tmp_path: Path, tiny: TinyDelta, commit: str | None) -> Path:
    device = tmp_path / "device"
    ostree(device, "init", "--mode=bare")
    if commit:
        ostree(device, "pull-local", str(tiny.repo), commit)
    return device


def assert_as_ostree_inline_writes(tiny: TinyDelta, tmp_path: Path) -> None:
    ours = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    theirs = tiny.inline  # `static-delta generate --inline` of the same delta
    mine, reference = (tmp_path / ours.file).read_bytes(), theirs.read_bytes()
    assert len(mine) == len(reference)
    # Only the superblock's generation timestamp (8 bytes, big-endian) may differ.
    differing = [i for i, (a, b) in enumerate(zip(mine, reference, strict=True)) if a != b]
    assert not differing or differing[-1] - differing[0] < 8
    assert ours.sha256 == hashlib.sha256(mine).hexdigest() and ours.bytes == len(mine)
    assert (ours.from_commit, ours.to_commit, ours.to_version) == (tiny.old, tiny.new, "2")
    assert ours.parts == check_offline_file(theirs).parts
    assert (tmp_path / ours.file).stat().st_mode & 0o777 == 0o644  # served as it is


def test_file_is_byte_for_byte_what_ostree_inline_writes(tiny: TinyDelta,
                                                         tmp_path: Path) -> None:
    assert_as_ostree_inline_writes(tiny, tmp_path)


def test_a_signed_commits_file_is_byte_for_byte_what_ostree_inline_writes(
        signed: tuple[TinyDelta, Path, Path], tmp_path: Path) -> None:
    """The parts go before the commit's detached metadata (its signature), as ostree
    puts them."""
    tiny, _, _ = signed
    assert_as_ostree_inline_writes(tiny, tmp_path)


def test_a_signed_superblock_is_read_through_its_envelope(tiny: TinyDelta,
                                                          tmp_path: Path) -> None:
    """ostree's `generate --sign` wraps the superblock as (t ay a{sv}) with magic OSTSGNDT
    (Debian 12's ostree has no ed25519, so the envelope is made here)."""
    delta = tmp_path / "delta"
    shutil.copytree(tiny.delta, delta)
    inner = (tiny.delta / "superblock").read_bytes()
    magic = int.from_bytes(b"OSTSGNDT", "little")
    envelope = gvariant.join(gvariant.encode("(taya{sv})", (magic, inner, [])))
    (delta / "superblock").write_bytes(envelope)
    plain = write_offline_file(tiny.delta, tmp_path / "plain.delta", "1")
    enveloped = write_offline_file(delta, tmp_path / "enveloped.delta", "1")
    assert (enveloped.to_commit, enveloped.parts) == (plain.to_commit, plain.parts)
    (delta / "superblock").write_bytes(envelope[:12])
    with pytest.raises(OfflineDeltaError) as caught:
        write_offline_file(delta, tmp_path / "damaged.delta", "1")
    assert str(caught.value).startswith(f"{delta / 'superblock'}: damaged signed superblock: ")
    assert not (tmp_path / "damaged.delta").exists()


def test_a_part_of_the_wrong_size_in_the_delta_directory_is_named(tiny: TinyDelta,
                                                                  tmp_path: Path) -> None:
    delta = tmp_path / "delta"
    shutil.copytree(tiny.delta, delta)
    size = (delta / "0").stat().st_size
    (delta / "0").write_bytes((delta / "0").read_bytes()[:-1])
    with pytest.raises(OfflineDeltaError) as caught:
        write_offline_file(delta, tmp_path / "out.delta", "1")
    assert str(caught.value) == f"{delta / '0'}: missing or not {size} bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["delta"]  # no file, no temporary


def test_file_applies_with_ostree_on_a_device_holding_the_old_commit(
        tiny: TinyDelta, tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    device = device_with(tmp_path, tiny, tiny.old)
    assert apply_offline(Runner(), device, tmp_path / written.file) == tiny.new
    ostree(device, "fsck")
    assert ostree(device, "cat", tiny.new, "/usr/etc/motd") == "release 2\n"


def test_a_file_with_fallback_entries_is_refused_and_the_device_untouched(
        tmp_path: Path) -> None:
    tiny = tiny_delta(tmp_path / "fallback", "--min-fallback-size=1")
    file = tmp_path / offline_name(tiny.old, tiny.new)
    shutil.copyfile(tiny.inline, file)
    device = device_with(tmp_path, tiny, tiny.old)
    with pytest.raises(OfflineDeltaError, match=r"cannot be applied offline: it leaves 1 "
                                                r"objects .* over HTTP"):
        apply_offline(Runner(), device, file)
    assert not (device / "objects" / tiny.new[:2] / f"{tiny.new[2:]}.commit").exists()
    with pytest.raises(OfflineDeltaError) as caught:
        write_offline_file(tiny.delta, tmp_path / "out.delta", None)
    assert str(caught.value) == (
        f"{tiny.delta / 'superblock'}: the delta has 1 fallback entries; an offline file "
        "made from it could not be applied (hint: delete the delta directory and rerun "
        "`deltas` (it sets --min-fallback-size=0))")


def test_a_damaged_part_is_named_and_the_device_untouched(tiny: TinyDelta,
                                                          tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    file = tmp_path / written.file
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the large part
    file.write_bytes(bytes(data))
    part = (tiny.delta / "0").read_bytes()
    with pytest.raises(OfflineDeltaError) as caught:
        check_offline_file(file)
    assert str(caught.value) == (
        f"{file.name}: part 0 is damaged: its sha256 or size differs from the superblock's "
        f"{hashlib.sha256(part).hexdigest()[:12]} ({len(part)} bytes) (hint: copy it again)")
    device = device_with(tmp_path, tiny, tiny.old)
    with pytest.raises(OfflineDeltaError, match=r"part \d is damaged"):
        apply_offline(Runner(), device, file)
    assert not (device / "objects" / tiny.new[:2] / f"{tiny.new[2:]}.commit").exists()
    ostree(device, "fsck")


def test_a_damaged_commit_inside_the_file_is_named(tiny: TinyDelta, tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    file = tmp_path / written.file
    data = file.read_bytes()
    commit = ostree_commit_bytes(tiny)
    # A letter of the commit's first metadata key: still a well-formed GVariant.
    letter = next(i for i, byte in enumerate(commit) if chr(byte).isalpha())
    at = data.index(commit) + letter
    file.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:])
    with pytest.raises(OfflineDeltaError) as caught:
        check_offline_file(file)
    assert str(caught.value) == (f"{file.name}: the commit inside does not match its checksum "
                                 f"{tiny.new[:12]}: the file is damaged (hint: copy it again)")


def ostree_commit_bytes(tiny: TinyDelta) -> bytes:
    return (tiny.repo / "objects" / tiny.new[:2] / f"{tiny.new[2:]}.commit").read_bytes()


@pytest.mark.parametrize(("mangle", "problem"), [
    (lambda data: data[:100], "not an ostree static delta"),
    (lambda data: b"", "not an ostree static delta"),
    (lambda data: b"hello, this is a text file\n" * 40, "not an ostree static delta"),
])
def test_a_file_that_is_no_delta_is_named(tiny: TinyDelta, tmp_path: Path, mangle: object,
                                          problem: str) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    file = tmp_path / written.file
    file.write_bytes(mangle(file.read_bytes()))  # type: ignore[operator]
    with pytest.raises(OfflineDeltaError) as caught:
        check_offline_file(file)
    assert str(caught.value).startswith(f"{file.name}: {problem} (")


def test_a_repository_superblock_is_not_an_offline_file(tiny: TinyDelta,
                                                        tmp_path: Path) -> None:
    copy = tmp_path / offline_name(tiny.old, tiny.new)
    copy.write_bytes((tiny.delta / "superblock").read_bytes())
    parts = int(re.findall(r"^Number of parts: (\d+)$", ostree(
        tiny.repo, "static-delta", "show", f"{tiny.old}-{tiny.new}"), re.MULTILINE)[0])
    with pytest.raises(OfflineDeltaError) as caught:
        check_offline_file(copy)
    assert str(caught.value) == (
        f"{copy.name}: part 0 of {parts} is not inside the file (a repository superblock, "
        "not an offline delta) (hint: use the FROM-TO.delta files from DIR/deltas/REF/)")


def test_the_device_must_hold_the_source_commit(tiny: TinyDelta, tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    device = device_with(tmp_path, tiny, None)
    with pytest.raises(OfflineDeltaError) as caught:
        apply_offline(Runner(), device, tmp_path / written.file)
    assert str(caught.value) == (
        f"{written.file}: commit {tiny.old}, the delta's source, is not in repository "
        f"{device} (hint: this file updates devices that run that commit; use the file whose "
        "name starts with the device's commit, or empty-*.delta)")


def test_index_lists_each_file_with_its_size_and_sha256(tiny: TinyDelta,
                                                       tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    index = json.loads(index_json("test", tiny.new, "2", [written]))
    assert index["format"] == "microshift-edge-builder/offline-deltas/v1"
    [entry] = index["files"]
    assert entry == {"file": written.file, "from_commit": tiny.old, "from_version": "1",
                     "to_commit": tiny.new, "to_version": "2", "bytes": written.bytes,
                     "sha256": written.sha256, "parts": written.parts}


def test_cli_says_what_is_wrong_with_a_file(tiny: TinyDelta, tmp_path: Path) -> None:
    bad = tmp_path / offline_name(tiny.old, tiny.new)
    bad.write_bytes(b"\0" * 64)
    device = device_with(tmp_path, tiny, tiny.old)
    proc = subprocess.run([sys.executable, "-m", "builder", "apply-delta", "--repo", str(device),
                           str(bad)], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 1
    assert f"{bad.name}: not an ostree static delta" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_index_is_pretty_sorted_json_naming_ref_head_and_files(tiny: TinyDelta,
                                                                   tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    expected = {"format": "microshift-edge-builder/offline-deltas/v1", "ref": "test",
                "to_commit": tiny.new, "to_version": "2", "files": [
                    {"file": written.file, "from_commit": tiny.old, "from_version": "1",
                     "to_commit": tiny.new, "to_version": "2", "bytes": written.bytes,
                     "sha256": written.sha256, "parts": written.parts}]}
    # Byte-stable (signed, and compared across reruns): 2-space indent, sorted keys.
    assert index_json("test", tiny.new, "2", [written]) == \
        json.dumps(expected, indent=2, sort_keys=True) + "\n"


def test_applying_to_a_directory_that_is_no_repository_is_refused(tiny: TinyDelta,
                                                                  tmp_path: Path) -> None:
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    with pytest.raises(OfflineDeltaError) as caught:
        apply_offline(Runner(), tmp_path / "nothing", tmp_path / written.file)
    assert str(caught.value) == f"{tmp_path / 'nothing'} is not an ostree repository"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinyDelta, Path, Path]:
    """A tiny delta to a commit signed by a release key; that key's and another key's
    public halves."""
    return signed_delta(tmp_path_factory.mktemp("signed") / "signed", *NO_FALLBACK)


def trusting(tmp_path: Path, tiny: TinyDelta, how: str, key: Path | None) -> Path:
    device = device_with(tmp_path, tiny, tiny.old)
    options = {"keypath": [f"--set=gpgkeypath={key}"], "import": [f"--gpg-import={key}"],
               "none": [], "empty keypath": ["--set=gpgkeypath="]}[how]
    ostree(device, "remote", "add", "--set=gpg-verify=true", *options, "origin",
           "http://updates.example.com/repo")
    return device


@pytest.mark.parametrize("how", ["keypath", "import"])
def test_a_delta_to_a_commit_signed_by_the_remotes_key_applies(
        signed: tuple[TinyDelta, Path, Path], tmp_path: Path, how: str) -> None:
    tiny, release, _ = signed
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    device = trusting(tmp_path, tiny, how, release)
    assert apply_offline(Runner(), device, tmp_path / written.file, "origin") == tiny.new


def test_a_delta_to_a_commit_another_key_signed_is_refused(
        signed: tuple[TinyDelta, Path, Path], tmp_path: Path) -> None:
    tiny, _, other = signed
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    device = trusting(tmp_path, tiny, "keypath", other)
    with pytest.raises(OfflineDeltaError) as caught:
        apply_offline(Runner(), device, tmp_path / written.file, "origin")
    assert str(caught.value) == (
        f"{written.file}: commit {tiny.new[:12]} does not verify with the keys of remote "
        "'origin' (hint: do not deploy it; its objects stay unreferenced and `ostree prune` "
        "removes them)")


@pytest.mark.parametrize("how", ["none", "empty keypath"])
def test_a_remote_without_keys_verifies_nothing(signed: tuple[TinyDelta, Path, Path],
                                                tmp_path: Path, how: str) -> None:
    """An empty gpgkeypath names no keyring (a pull from that remote verifies nothing)."""
    tiny, _, _ = signed
    written = write_offline_file(tiny.delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    device = trusting(tmp_path, tiny, how, None)
    with pytest.raises(OfflineDeltaError) as caught:
        apply_offline(Runner(), device, tmp_path / written.file, "origin")
    assert str(caught.value) == (f"remote 'origin' of {device} has no GPG keys to verify with "
                                 "(hint: add the remote with --gpg-import=KEY.asc)")


def test_a_file_from_scratch_applies_on_an_empty_repository(tiny: TinyDelta,
                                                            tmp_path: Path) -> None:
    """For a device that holds none of the fleet's commits: empty-TO.delta."""
    repo = scratch_delta(tmp_path / "scratch", *NO_FALLBACK).repo
    written = write_offline_file(delta_dir(repo, None, tiny.new),
                                 tmp_path / offline_name(None, tiny.new), None)
    assert (written.file, written.from_commit) == (f"empty-{tiny.new}.delta", None)
    device = device_with(tmp_path, tiny, None)
    assert apply_offline(Runner(), device, tmp_path / written.file) == tiny.new
    assert ostree(device, "cat", tiny.new, "/usr/etc/motd") == "release 2\n"


def test_a_file_that_cannot_be_put_in_place_leaves_nothing_behind(tiny: TinyDelta,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "taken.delta").mkdir(parents=True)  # a directory where the file should go
    with pytest.raises(IsADirectoryError):
        write_offline_file(tiny.delta, out / "taken.delta", "1")
    assert [p.name for p in out.iterdir()] == ["taken.delta"]


@pytest.fixture
def usb(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of its own, as a USB stick is (a tmpfs)."""
    requires.need_root("mounting a tmpfs")
    mount = tmp_path / "usb"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_file_written_onto_another_filesystem_is_put_in_place(tiny: TinyDelta,
                                                                usb: Path) -> None:
    """Straight onto a USB stick: the draft is written beside the file, so putting it in
    place is a rename on that filesystem (from the temporary directory it would fail with
    "Invalid cross-device link")."""
    assert usb.stat().st_dev != Path(tempfile.gettempdir()).stat().st_dev
    written = write_offline_file(tiny.delta, usb / offline_name(tiny.old, tiny.new), "1")
    assert [p.name for p in usb.iterdir()] == [written.file]
    assert check_offline_file(usb / written.file).sha256 == written.sha256


def test_a_big_endian_delta_is_written_and_applies(tiny: TinyDelta, tmp_path: Path) -> None:
    """A delta generated on a big-endian host (or with --set-endianness=B): its part
    headers are read in that order, and the file is still ostree's own inline file."""
    repo = tiny_delta(tmp_path / "big", *NO_FALLBACK, "--set-endianness=B").repo
    written = write_offline_file(delta_dir(repo, tiny.old, tiny.new),
                                 tmp_path / offline_name(tiny.old, tiny.new), "1")
    little = write_offline_file(tiny.delta, tmp_path / "little.delta", "1")
    assert written.parts == little.parts and written.to_commit == tiny.new
    device = device_with(tmp_path, tiny, tiny.old)
    assert apply_offline(Runner(), device, tmp_path / written.file) == tiny.new
    assert ostree(device, "cat", tiny.new, "/usr/etc/motd") == "release 2\n"
