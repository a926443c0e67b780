"""The local compose: reproducible commits holding the release's RPMs and images, signed,
crash-safe. Integration tests run rpm, ostree, skopeo and gpg for real (as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from builder.compose.commit import KILL_ENV, STAGES
from builder.release.model import load_release
from tests.support import requires
from tests.support.cli import RELEASE
from tests.support.ostree import (
    IMAGE,
    ComposedPair,
    cli,
    compose,
    compose_subprocess,
    copy_build,
    device_repo,
    head,
    ostree,
    serve,
)

pytestmark = [
    pytest.mark.integration,
    requires.root_only("compose runs rpm --root and keeps ownership"),
]


@pytest.fixture(scope="module")
def checkout(composed_pair: ComposedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Release 1's commit, checked out as a device would get it."""
    dest = tmp_path_factory.mktemp("checkout") / "tree"
    ostree(f"--repo={composed_pair.repo}", "checkout", composed_pair.commit1, dest)
    return dest


def test_two_clean_composes_give_the_same_commit(built_release: Path, composed_pair: ComposedPair,
                                                 tmp_path: Path) -> None:
    again = copy_build(built_release, tmp_path / "again")
    compose(again)
    assert head(again / "ostree" / "repo", composed_pair.ref) == composed_pair.commit1


def test_repo_passes_fsck_and_commits_carry_version_parent_and_sample_label(
        composed_pair: ComposedPair) -> None:
    ostree(f"--repo={composed_pair.repo}", "fsck")
    # The build repo's objects were hard-linked into the compose tree: none may have changed.
    ostree(f"--repo={composed_pair.build_dir / 'ostree' / 'build-repo'}", "fsck")
    shown = ostree(f"--repo={composed_pair.repo}", "show", composed_pair.commit2).stdout
    assert f"Parent:  {composed_pair.commit1}" in shown
    assert "Version: 4.14.3-1" in shown
    assert "SAMPLE base" in shown
    first = ostree(f"--repo={composed_pair.repo}", "show", composed_pair.commit1).stdout
    assert "Parent:" not in first  # the first commit of a fresh repo has no parent
    assert "Date:  2023-11-14 22:13:20" in first  # release.yaml source_date_epoch


def test_commit_holds_every_release_image_by_digest(composed_pair: ComposedPair,
                                                    checkout: Path, tmp_path: Path) -> None:
    release = load_release(RELEASE)
    images = [img for img in release.images()
              if img.component in ("core", "networking-ovnk", "storage-topolvm")]
    store = checkout / "usr/share/containers/storage"
    for image in images:
        ref = (f"containers-storage:[overlay@{store}+{tmp_path / 'run'}:"
               f"overlay.skip_mount_home=true]{image.ref}")
        proc = subprocess.run(["skopeo", "inspect", ref], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        assert f'"Digest": "{image.digest}"' in proc.stdout
    conf = (checkout / "usr/etc/containers/storage.conf").read_text()
    assert 'additionalimagestores = ["/usr/share/containers/storage"]' in conf


def test_commit_rpm_database_holds_the_component_rpms(checkout: Path) -> None:
    installed = subprocess.run(
        ["rpm", "--root", str(checkout), "--dbpath", "/usr/lib/sysimage/rpm", "-qa",
         "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\\n"],
        capture_output=True, text=True, check=True).stdout.split()
    for name in ("microshift-core", "microshift-networking-ovnk", "microshift-storage-topolvm"):
        assert f"{name}-4.14.2-1" in installed
    assert "kernel-9.2.sample-1" in installed  # from the SAMPLE base


def test_commit_follows_the_ostree_layout(composed_pair: ComposedPair, checkout: Path) -> None:
    assert not (checkout / "etc").exists()
    assert (checkout / "usr/etc/microshift/config.yaml").is_file()
    assert list((checkout / "var").iterdir()) == []
    assert list((checkout / "usr/lib/modules").glob("*/vmlinuz"))
    autovar = (checkout / "usr/lib/tmpfiles.d/microshift-builder-autovar.conf").read_text()
    assert "d /var/lib " in autovar
    listing = ostree(f"--repo={composed_pair.repo}", "ls", composed_pair.commit1,
                     "/usr/lib/sysimage/rpm").stdout
    rpmdb = {line.split()[-1].rsplit("/", 1)[-1] for line in listing.splitlines()[1:]}
    assert rpmdb == {"rpmdb.sqlite"}  # no -wal/-shm/lock side files from the build host


def test_services_presets_and_firewall_applied_as_image_builder_would(checkout: Path) -> None:
    wants = checkout / "usr/etc/systemd/system/multi-user.target.wants"
    assert os.readlink(wants / "microshift.service") == "/usr/lib/systemd/system/microshift.service"
    assert (wants / "microshift-ovs-init.service").is_symlink()
    trusted = (checkout / "usr/etc/firewalld/zones/trusted.xml").read_text()
    assert '<source address="10.42.0.0/16" />' in trusted
    public = (checkout / "usr/etc/firewalld/zones/public.xml").read_text()
    assert '<port port="6443" protocol="tcp" />' in public


def test_recompose_of_unchanged_inputs_keeps_the_ref(composed_pair: ComposedPair,
                                                     tmp_path: Path) -> None:
    build = copy_build(composed_pair.build_dir, tmp_path / "build")
    repo = build / "ostree" / "repo"
    compose(build, composed_pair.release2)
    assert head(repo, composed_pair.ref) == composed_pair.commit2
    log = ostree(f"--repo={repo}", "log", composed_pair.ref).stdout
    assert log.count("commit ") == 2


def test_a_compose_of_the_same_inputs_is_skipped_until_its_record_is_gone(
        composed_pair: ComposedPair, tmp_path: Path) -> None:
    build = copy_build(composed_pair.build_dir, tmp_path / "build")
    record = build / "ostree" / "compose-inputs" / f"{composed_pair.ref}.json"
    assert json.loads(record.read_text())["commit"] == composed_pair.commit2
    again = compose_subprocess(build, release=composed_pair.release2)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "compose microshift-full (x86_64): unchanged (step " in again.stderr
    assert "tree: install packages" not in again.stderr
    assert head(build / "ostree" / "repo", composed_pair.ref) == composed_pair.commit2
    # Without the record (a build directory from before it) the tree is built again, and
    # its equal content keeps the ref where it is.
    record.unlink()
    rebuilt = compose_subprocess(build, release=composed_pair.release2)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert "tree: install packages" in rebuilt.stderr
    assert (f"composing: no record of what {composed_pair.ref}'s head was composed from"
            in rebuilt.stderr)
    assert f"{composed_pair.ref} = {composed_pair.commit2} (unchanged: the ref already holds " \
        "this content)" in rebuilt.stderr
    assert json.loads(record.read_text())["commit"] == composed_pair.commit2


def test_a_release_dated_before_the_refs_head_is_refused(composed_pair: ComposedPair,
                                                        tmp_path: Path) -> None:
    """Devices refuse a commit older than the one they run, so such a compose would give the
    ref a head no device takes: refused before any work, the ref where it was."""
    build = copy_build(composed_pair.build_dir, tmp_path / "build")
    release_dir = tmp_path / "older"
    shutil.copytree(composed_pair.release2.parent, release_dir)
    older = release_dir / composed_pair.release2.name
    older.write_text(older.read_text().replace("source_date_epoch: 1700000000\n",
                                               "source_date_epoch: 1690000000\n"))
    refused = compose_subprocess(build, release=older)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-2:] == [
        f"error: ref {composed_pair.ref} holds 4.14.3-1 dated 2023-11-14T22:13:20Z; release "
        "4.14.3-1 is dated 2023-07-22T04:26:40Z (source_date_epoch), older: devices would "
        "refuse it as a downgrade",
        "hint: to roll back on purpose, release the old content with a later "
        "source_date_epoch, or pass --allow-older for devices set to allow_downgrade: true"]
    assert "tree: install packages" not in refused.stderr
    assert head(build / "ostree" / "repo", composed_pair.ref) == composed_pair.commit2


def test_device_pull_verifies_signature(composed_pair: ComposedPair, tmp_path: Path) -> None:
    with serve(composed_pair.repo) as (url, _):
        device = device_repo(tmp_path / "device", url, composed_pair.public_key)
        pulled = ostree(f"--repo={device}", "pull", "origin", composed_pair.ref, check=False)
    assert pulled.returncode == 0, pulled.stderr
    assert head(device, f"origin:{composed_pair.ref}") == composed_pair.commit2


@pytest.mark.parametrize("kind", ["commitmeta", "commit"])
def test_tampered_commit_or_signature_is_rejected(composed_pair: ComposedPair, tmp_path: Path,
                                                  kind: str) -> None:
    published = copy_build(composed_pair.repo, tmp_path / "published")
    # Without deltas the device fetches the commit and its signature as loose objects (a delta
    # superblock carries its own copy of the signature). The publisher re-signs the summary.
    for delta in ostree(f"--repo={published}", "static-delta", "list").stdout.split():
        ostree(f"--repo={published}", "static-delta", "delete", delta)
    gpg = composed_pair.build_dir / "gpg"
    key = subprocess.run(["gpg", "--homedir", str(gpg), "--list-secret-keys", "--with-colons"],
                         capture_output=True, text=True, check=True).stdout
    fingerprint = next(line.split(":")[9] for line in key.splitlines() if line.startswith("fpr"))
    ostree(f"--repo={published}", "summary", "-u", f"--gpg-sign={fingerprint}",
           f"--gpg-homedir={gpg}")
    subprocess.run(["gpgconf", "--homedir", str(gpg), "--kill", "gpg-agent"], check=False)
    commit = composed_pair.commit2
    target = published / "objects" / commit[:2] / f"{commit[2:]}.{kind}"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with serve(published) as (url, _):
        device = device_repo(tmp_path / "device", url, composed_pair.public_key)
        pulled = ostree(f"--repo={device}", "pull", "origin", composed_pair.ref, check=False)
    assert pulled.returncode != 0
    assert head(device, f"origin:{composed_pair.ref}") is None
    assert ("BAD signature" in pulled.stderr if kind == "commitmeta"
            else "Corrupted" in pulled.stderr or "checksum" in pulled.stderr.lower())


def test_commit_signed_by_another_key_is_rejected(composed_pair: ComposedPair,
                                                  tmp_path: Path) -> None:
    other = tmp_path / "other-gpg"
    other.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(other), "--batch", "--passphrase", "",
                    "--quick-gen-key", "attacker <a@example.invalid>", "rsa2048", "sign", "never"],
                   check=True, capture_output=True)
    with serve(composed_pair.repo) as (url, _):
        device = device_repo(tmp_path / "device", url, None)
        ostree(f"--repo={device}", "remote", "add", "--force", "--set=gpg-verify=true",
               f"--gpg-import={_export(other, tmp_path / 'attacker.asc')}", "origin", url)
        pulled = ostree(f"--repo={device}", "pull", "origin", composed_pair.ref, check=False)
    subprocess.run(["gpgconf", "--homedir", str(other), "--kill", "gpg-agent"], check=False)
    assert pulled.returncode != 0
    assert "public key not found" in pulled.stderr or "signature" in pulled.stderr.lower()


def _export(homedir: Path, dest: Path) -> Path:
    dest.write_bytes(subprocess.run(["gpg", "--homedir", str(homedir), "--export", "--armor"],
                                    capture_output=True, check=True).stdout)
    return dest


@pytest.mark.parametrize("stage", STAGES)  # every checkpoint compose has
def test_compose_killed_at_any_stage_leaves_a_sound_repo_and_reruns(
        stage: str, built_release: Path, composed_pair: ComposedPair, tmp_path: Path) -> None:
    build = copy_build(built_release, tmp_path / "build")
    assert cli("--release", RELEASE, "blueprint", "--image", IMAGE, "--build-dir", build) == 0
    killed = compose_subprocess(build, {KILL_ENV: stage})
    assert killed.returncode == -9, killed.stderr
    repo = build / "ostree" / "repo"
    ostree(f"--repo={repo}", "fsck")
    expected_head = composed_pair.commit1 if stage == "ref-moved" else None
    assert head(repo, composed_pair.ref) == expected_head
    rerun = compose_subprocess(build)
    assert rerun.returncode == 0, rerun.stderr
    assert head(repo, composed_pair.ref) == composed_pair.commit1
    ostree(f"--repo={repo}", "fsck")
    summary = ostree(f"--repo={repo}", "summary", "--view").stdout
    assert composed_pair.commit1 in summary
    assert not (build / "ostree" / "work").exists()


def test_commit_runs_a_real_release_offline(composed_pair: ComposedPair, checkout: Path,
                                            tmp_path: Path) -> None:
    """What a real binary needs on the device: CRI-O's drop-in with the embedded pause image,
    the release's binaries, and greenboot's rules (issue 17's acceptance)."""
    release = load_release(RELEASE)
    [pause] = [img for img in release.images() if img.name == "pause"]
    dropin = tomllib.loads((checkout / "usr/etc/crio/crio.conf.d/10-microshift.conf").read_text())
    assert dropin["crio"]["image"]["pause_image"] == pause.ref
    assert dropin["crio"]["runtime"]["cgroup_manager"] == "systemd"
    assert dropin["crio"]["image"]["global_auth_file"] == "/etc/crio/openshift-pull-secret"
    ovn = tomllib.loads((checkout / "usr/etc/crio/crio.conf.d/11-microshift-ovn.conf").read_text())
    assert "/run/cni/bin" in ovn["crio"]["network"]["plugin_dirs"]
    blueprint = tomllib.loads((composed_pair.build_dir / "blueprints" / f"{IMAGE}.toml")
                              .read_text())
    assert pause.ref in [c["source"] for c in blueprint["containers"]]
    store = checkout / "usr/share/containers/storage"
    proc = subprocess.run(["skopeo", "inspect", f"containers-storage:[overlay@{store}+"
                           f"{tmp_path / 'run'}:overlay.skip_mount_home=true]{pause.ref}"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and f'"Digest": "{pause.digest}"' in proc.stdout, proc.stderr
    for binary in ("microshift", "microshift-etcd", "microshift-cleanup-data",
                   "microshift-sos-report", "microshift-components"):
        assert os.access(checkout / "usr/bin" / binary, os.X_OK), binary
    assert os.readlink(checkout / "usr/etc/systemd/user/grub-boot-success.timer") == "/dev/null"
    wants = checkout / "usr/etc/systemd/system/multi-user.target.wants"
    assert (wants / "greenboot-healthcheck.service").is_symlink()
    assert (checkout / "usr/etc/systemd/system/microshift.service.wants/"
            "microshift-components.service").is_symlink()
    journald = (checkout / "usr/etc/systemd/journald.conf.d/microshift.conf").read_text()
    assert "Storage=persistent" in journald.splitlines()
    trusted = (checkout / "usr/etc/firewalld/zones/trusted.xml").read_text()
    assert '<source address="fd01::/48" />' in trusted
    public = (checkout / "usr/etc/firewalld/zones/public.xml").read_text()
    assert '<port port="5353" protocol="udp" />' in public
