"""Installer ISO: built with the real ostree and xorriso from a small ostree repo made here.

The image's commit is a tiny deployable tree committed with a fixed timestamp on
rhel/9/x86_64/edge, so these tests do not depend on the compose step. The "boot ISO" is a
TEST STAND-IN made with xorriso: the files an Anaconda boot ISO has (isolinux/isolinux.cfg,
EFI/BOOT/grub.cfg, .treeinfo, images/install.img) with stub contents and El Torito records.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.installer.bootiso import boot_images, edit_grub, edit_isolinux, list_iso
from builder.installer.kickstart import validate
from tests.installer.support import make_pull_secret, write_blueprints
from tests.support.cli import RELEASE, run_cli

pytestmark = pytest.mark.integration

REF = "microshift/x86_64/microshift-full"  # the profile ref (blueprints/profiles.yaml)
IMAGE = "microshift-full"
BOOT_VOLID = "RHEL-9-3-0-BaseOS-x86_64"
ISOLINUX_CFG = f"""\
default vesamenu.c32
label linux
  menu label ^Install Red Hat Enterprise Linux 9.3
  kernel vmlinuz
  append initrd=initrd.img inst.stage2=hd:LABEL={BOOT_VOLID} quiet
label check
  menu label Test this ^media & install Red Hat Enterprise Linux 9.3
  kernel vmlinuz
  append initrd=initrd.img inst.stage2=hd:LABEL={BOOT_VOLID} rd.live.check quiet
"""
GRUB_CFG = f"""\
set timeout=60
menuentry 'Install Red Hat Enterprise Linux 9.3' --class red --class os {{
\tlinuxefi /images/pxeboot/vmlinuz inst.stage2=hd:LABEL={BOOT_VOLID} quiet
\tinitrdefi /images/pxeboot/initrd.img
}}
"""


def sh(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True,
                          text=True).stdout


def make_commit(repo: Path, tree: Path, timestamp: str, version: str) -> str:
    """Commit a deployable tree (kernel + os-release) on REF with a fixed timestamp."""
    (tree / "usr/lib/modules/5.14.0-sample").mkdir(parents=True, exist_ok=True)
    (tree / "usr/lib/modules/5.14.0-sample/vmlinuz").write_text("SAMPLE kernel stand-in\n")
    (tree / "usr/etc").mkdir(parents=True, exist_ok=True)
    (tree / "usr/lib/os-release").write_text('ID=rhel\nPRETTY_NAME="SAMPLE edge"\n')
    (tree / "usr/share/microshift").mkdir(parents=True, exist_ok=True)
    (tree / "usr/share/microshift/version").write_text(version + "\n")
    return sh("ostree", f"--repo={repo}", "commit", f"--branch={REF}",
              f"--timestamp={timestamp}", f"--add-metadata-string=version={version}",
              f"--subject={version}", tree).strip()


@pytest.fixture
def build_dir(tmp_path: Path) -> Path:
    """A build dir with the image's blueprint and two commits on REF (a parent and head)."""
    build = tmp_path / "build"
    write_blueprints(build, IMAGE, "microshift-minimal")
    repo = build / "ostree/repo"
    repo.mkdir(parents=True)
    sh("ostree", f"--repo={repo}", "init", "--mode=archive")
    make_commit(repo, tmp_path / "tree", "2023-11-14T22:13:20Z", "4.14.1")
    make_commit(repo, tmp_path / "tree", "2023-11-15T22:13:20Z", "4.14.2")
    return build


def make_boot_iso(directory: Path, *, installer: bool = True) -> Path:
    """TEST STAND-IN for a RHEL boot ISO: real layout and boot records, stub contents."""
    root = directory / "boot-root"
    for rel, text in {"isolinux/isolinux.cfg": ISOLINUX_CFG, "EFI/BOOT/grub.cfg": GRUB_CFG,
                      ".treeinfo": "[general]\nname = TEST STAND-IN\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "isolinux/isolinux.bin").write_bytes(bytes(2048))
    (root / "images").mkdir(exist_ok=True)
    (root / "images/efiboot.img").write_bytes(bytes(65536))
    # A few MB: checkisomd5 cannot judge images of only a few hundred sectors.
    (root / "images/install.img").write_bytes(bytes(3 << 20))
    if not installer:
        (root / "images/install.img").unlink()
        (root / ".treeinfo").unlink()
    iso = directory / ("boot.iso" if installer else "not-an-installer.iso")
    sh("xorriso", "-as", "mkisofs", "-o", iso, "-V", BOOT_VOLID, "-R",
       "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot",
       "-boot-load-size", "4", "-boot-info-table", "-eltorito-alt-boot",
       "-e", "images/efiboot.img", "-no-emul-boot", root)
    return iso


def installer(build: Path, *extra: str | Path) -> int:
    return run_cli("--release", RELEASE, "installer", "--build-dir", build, "--image", IMAGE,
                   "--url", "http://updates.example.com/repo", *extra)


def extract(iso: Path, inside: str, dest: Path) -> Path:
    sh("xorriso", "-osirrox", "on", "-indev", iso, "-extract", inside, dest)
    return dest


def head(repo: Path) -> str:
    return sh("ostree", f"--repo={repo}", "rev-parse", REF).strip()


# --- the data ISO -----------------------------------------------------------------------
def test_iso_holds_kickstart_repo_and_manifest(build_dir: Path, tmp_path: Path) -> None:
    assert installer(build_dir) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    listing = list_iso(Runner(), iso)
    assert {"ks.cfg", "manifest.json", "ostree/repo/config", "sbom.spdx.json"} <= listing.files
    assert listing.volume_id == "MICROSHIFT-FULL"

    repo = extract(iso, "/ostree", tmp_path / "x/ostree") / "repo"
    sh("ostree", f"--repo={repo}", "fsck")
    expected = head(build_dir / "ostree/repo")
    assert head(repo) == expected
    manifest = json.loads(extract(iso, "/manifest.json", tmp_path / "m.json").read_text())
    assert (manifest["commit"], manifest["ref"], manifest["version"]) == (expected, REF, "4.14.2")
    assert manifest["sizes"]["repo_bytes"] > 0 and manifest["sizes"]["kickstart_bytes"] > 0
    # A hand-made commit without an rpm database still gets an SBOM: the commit, no RPMs.
    assert manifest["sbom"] == "sbom.spdx.json"
    sbom = json.loads(extract(iso, "/sbom.spdx.json", tmp_path / "sbom.json").read_text())
    assert [p["checksums"][0]["checksumValue"] for p in sbom["packages"]] == [expected]

    kickstart = extract(iso, "/ks.cfg", tmp_path / "ks.cfg").read_text()
    validate(kickstart)
    # A data ISO sits beside a stock boot ISO: its kickstart mounts it by its own label.
    assert "mount -o ro /dev/disk/by-label/MICROSHIFT-FULL /run/install/microshift" in kickstart
    assert "--url=file:///run/install/microshift/ostree/repo" in kickstart
    sidecar = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    assert sidecar["iso"]["sha256"] == hashlib.sha256(iso.read_bytes()).hexdigest()


def test_an_iso_of_the_same_inputs_is_kept_and_a_new_kickstart_rebuilds_it(
        build_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert installer(build_dir) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    first = iso.stat()
    capsys.readouterr()
    assert installer(build_dir) == 0
    err = capsys.readouterr().err
    assert f"installer {IMAGE}.iso: unchanged (step " in err and "write ISO" not in err
    assert (iso.stat().st_ino, iso.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    key = tmp_path / "admin.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTest admin@example\n")
    assert installer(build_dir, "--ssh-key", key) == 0
    assert "write ISO" in capsys.readouterr().err
    kickstart = extract(iso, "/ks.cfg", tmp_path / "ks.cfg").read_text()
    assert "AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTest" in kickstart


def test_iso_repo_holds_only_the_image_commit(build_dir: Path, tmp_path: Path) -> None:
    assert installer(build_dir) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    repo = extract(iso, "/ostree", tmp_path / "x/ostree") / "repo"
    parent = sh("ostree", f"--repo={build_dir / 'ostree/repo'}", "rev-parse", f"{REF}^").strip()
    commits = list((repo / "objects").rglob("*.commit"))
    assert len(commits) == 1, "the parent commit must not be shipped on the ISO"
    assert not (repo / "objects" / parent[:2] / f"{parent[2:]}.commit").exists()


def test_same_inputs_give_the_same_iso(build_dir: Path) -> None:
    assert installer(build_dir) == 0
    first = (build_dir / "installer" / f"{IMAGE}.iso").read_bytes()
    time.sleep(1.1)  # file dates have one-second resolution: make the wall clock move
    assert installer(build_dir) == 0
    assert (build_dir / "installer" / f"{IMAGE}.iso").read_bytes() == first


def test_deploying_the_embedded_repo_gives_the_expected_commit(build_dir: Path,
                                                               tmp_path: Path) -> None:
    """A simulated device: a plain directory as sysroot, deployed from the ISO's repo."""
    assert installer(build_dir) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    repo = extract(iso, "/ostree", tmp_path / "x/ostree") / "repo"
    sysroot = tmp_path / "sysroot"
    sysroot.mkdir()
    sh("ostree", "admin", "init-fs", sysroot)
    sh("ostree", "admin", "os-init", "rhel", f"--sysroot={sysroot}")
    sh("ostree", f"--repo={sysroot / 'ostree/repo'}", "pull-local", repo, REF)
    sh("ostree", "admin", "deploy", f"--sysroot={sysroot}", "--os=rhel", REF)
    status = sh("ostree", "admin", "status", f"--sysroot={sysroot}")
    assert f"rhel {head(build_dir / 'ostree/repo')}.0" in status
    assert "Version: 4.14.2" in status


def test_pull_secret_on_the_iso_stays_private(build_dir: Path, tmp_path: Path) -> None:
    assert installer(build_dir, "--pull-secret", make_pull_secret(tmp_path)) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    out = sh("xorriso", "-indev", iso, "-lsl", "/ks.cfg")
    assert out.startswith("-rw-------"), out


# --- the boot ISO -----------------------------------------------------------------------
def test_boot_iso_gets_inst_ks_in_grub_and_isolinux(build_dir: Path, tmp_path: Path) -> None:
    boot = make_boot_iso(tmp_path)
    assert installer(build_dir, "--boot-iso", boot, "--pull-secret",
                      make_pull_secret(tmp_path)) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    listing = list_iso(Runner(), iso)
    assert listing.volume_id == BOOT_VOLID, "the boot entries find their stage2 by this label"
    assert {"ks.cfg", "ostree/repo/config", "images/install.img", ".treeinfo"} <= listing.files
    wanted = f"inst.ks=hd:LABEL={BOOT_VOLID}:/ks.cfg"
    isolinux = extract(iso, "/isolinux/isolinux.cfg", tmp_path / "isolinux.cfg").read_text()
    appends = [line.split() for line in isolinux.splitlines() if "append" in line]
    assert len(appends) == 2 and all(wanted in a and "inst.nosave=all_ks" in a for a in appends)
    grub = extract(iso, "/EFI/BOOT/grub.cfg", tmp_path / "grub.cfg").read_text()
    linux = [line.split() for line in grub.splitlines() if line.strip().startswith("linux")]
    assert len(linux) == 1 and wanted in linux[0]
    assert boot_images(Runner(), iso) == boot_images(Runner(), boot)
    sh("checkisomd5", iso)
    repo = extract(iso, "/ostree", tmp_path / "x/ostree") / "repo"
    sh("ostree", f"--repo={repo}", "fsck")
    # Booted from this ISO, Anaconda has it at /run/install/repo: no extra mount.
    kickstart = extract(iso, "/ks.cfg", tmp_path / "ks.cfg").read_text()
    assert "--url=file:///run/install/repo/ostree/repo" in kickstart
    assert "/dev/disk/by-label" not in kickstart


def test_non_installer_iso_is_rejected_and_nothing_is_written(
        build_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = make_boot_iso(tmp_path, installer=False)
    assert installer(build_dir, "--boot-iso", plain) != 0
    err = capsys.readouterr().err
    assert "not an installer ISO" in err and ".treeinfo" in err and "images/install.img" in err
    assert not list((build_dir / "installer").iterdir())


def test_a_file_that_is_not_an_iso_is_rejected(build_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "boot.iso"
    bogus.write_bytes(b"not an iso" * 100)
    assert installer(build_dir, "--boot-iso", bogus) != 0
    assert "not a readable ISO image" in capsys.readouterr().err
    assert not (build_dir / "installer" / f"{IMAGE}.iso").exists()


# --- bad inputs -------------------------------------------------------------------------
def test_no_commit_for_the_image_is_a_clear_error(build_dir: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert installer(build_dir, "--ref", "microshift/x86_64/not-composed") != 0
    assert "no commit for image microshift-full on ref microshift/x86_64/not-composed" \
        in capsys.readouterr().err
    assert not (build_dir / "installer").exists()


def test_no_ostree_repo_is_a_clear_error(build_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(build_dir / "ostree")
    assert installer(build_dir) != 0
    assert "no ostree repository" in capsys.readouterr().err


def test_unknown_image_is_a_clear_error(build_dir: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc = run_cli("--release", RELEASE, "installer", "--build-dir", build_dir,
                 "--image", "no-such-image")
    assert rc == 2
    assert "images: no image named 'no-such-image'; allowed: microshift-full" in \
        capsys.readouterr().err


@pytest.fixture
def gpg_homes(tmp_path: Path) -> Iterator[list[Path]]:
    """GnuPG homes for throwaway keys; their agents are stopped afterwards."""
    homes: list[Path] = []
    yield homes
    for home in homes:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


def make_key(homes: list[Path], directory: Path, email: str) -> tuple[Path, Path]:
    """A throwaway TEST signing key: (GnuPG home, exported ASCII-armored public key)."""
    home = directory / f"g{len(homes)}"  # short: gpg-agent's socket path has a length limit
    home.mkdir(mode=0o700)
    homes.append(home)
    sh("gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key",
       f"TEST signing key <{email}>", "ed25519", "sign", "never")
    key = directory / f"{email}.asc"
    key.write_text(sh("gpg", "--homedir", home, "--export", "--armor", email))
    return home, key


def test_signed_commit_needs_the_public_key(build_dir: Path, tmp_path: Path,
                                            gpg_homes: list[Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    home, key = make_key(gpg_homes, tmp_path, "signer@example.invalid")
    _, other_key = make_key(gpg_homes, tmp_path, "other@example.invalid")
    repo = build_dir / "ostree/repo"
    sh("ostree", f"--repo={repo}", "gpg-sign", f"--gpg-homedir={home}", head(repo),
       "signer@example.invalid")
    assert installer(build_dir) == 2
    assert "is signed" in capsys.readouterr().err
    assert installer(build_dir, "--gpg-key", other_key) == 2
    assert "does not verify the signature" in capsys.readouterr().err
    assert not (build_dir / "installer").exists()
    assert installer(build_dir, "--gpg-key", key) == 0
    manifest = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    assert manifest["signed"] is True
    kickstart = extract(build_dir / "installer" / f"{IMAGE}.iso", "/ks.cfg",
                        tmp_path / "ks.cfg").read_text()
    assert "--nogpg" not in kickstart and "gpg-verify=true" in kickstart


# --- boot configuration edits (no tools) --------------------------------------------------
def test_boot_config_edits_replace_an_earlier_inst_ks() -> None:
    args = "inst.ks=hd:LABEL=NEW:/ks.cfg"
    once = edit_isolinux(ISOLINUX_CFG, "inst.ks=hd:LABEL=OLD:/ks.cfg")
    twice = edit_isolinux(once, args)
    assert "LABEL=OLD" not in twice and twice.count(args) == 2
    grub = edit_grub(GRUB_CFG, args)
    assert grub.count(args) == 1
    assert "initrdefi /images/pxeboot/initrd.img\n" in grub


def test_verification_catches_a_manifest_mismatch(build_dir: Path, tmp_path: Path) -> None:
    from builder.installer.manifest import Manifest
    from builder.installer.read_back import verify_iso

    assert installer(build_dir) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    on_iso = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    on_iso.pop("iso")
    wrong = Manifest(**{**on_iso, "commit": "0" * 64})
    with pytest.raises(BuildError) as caught:
        verify_iso(Runner(), iso, wrong, tmp_path / "verify")
    assert str(caught.value) == (f"{iso}: ref {wrong.ref} is {on_iso['commit']} in the "
                                 f"embedded repo, but the manifest says {on_iso['commit']}")


# --- from a real compose ----------------------------------------------------------------
def test_installer_from_a_real_compose_deploys_the_head_commit(composed_pair: Any,
                                                                tmp_path: Path) -> None:
    """Acceptance: the ISO's embedded repo, pulled with signature checks as Anaconda does and
    deployed into a simulated device (a plain sysroot directory), gives the composed head."""
    from tests.support.ostree import copy_build

    build = copy_build(composed_pair.build_dir, tmp_path / "build")
    rc = run_cli("--release", composed_pair.release2, "installer", "--build-dir", build,
                 "--image", IMAGE, "--url", "http://updates.example.com/repo")
    assert rc == 0
    iso = build / "installer" / f"{IMAGE}.iso"
    manifest = json.loads((build / "installer" / f"{IMAGE}.json").read_text())
    assert (manifest["ref"], manifest["commit"]) == (composed_pair.ref, composed_pair.commit2)
    assert manifest["signed"] is True
    kickstart = extract(iso, "/ks.cfg", tmp_path / "ks.cfg").read_text()
    assert f"--ref={composed_pair.ref}" in kickstart and "--nogpg" not in kickstart
    # The commit's SBOM travels with it, the same bytes as DIR/sbom/NAME.spdx.json.
    sbom = extract(iso, "/sbom.spdx.json", tmp_path / "sbom.spdx.json").read_bytes()
    assert sbom == (build / "sbom" / f"{IMAGE}.spdx.json").read_bytes()
    assert composed_pair.commit2 in json.loads(sbom)["documentNamespace"]

    repo = extract(iso, "/ostree", tmp_path / "x/ostree") / "repo"
    assert len(list((repo / "objects").rglob("*.commit"))) == 1, "release 1 is not shipped"
    sysroot = tmp_path / "sysroot"
    sysroot.mkdir()
    sh("ostree", "admin", "init-fs", sysroot)
    sh("ostree", "admin", "os-init", "rhel", f"--sysroot={sysroot}")
    device = sysroot / "ostree/repo"
    sh("ostree", f"--repo={device}", "remote", "add", "--set=gpg-verify=true",
       f"--set=gpgkeypath={composed_pair.public_key}", "edge", f"file://{repo}")
    sh("ostree", f"--repo={device}", "pull", "edge", composed_pair.ref)
    sh("ostree", "admin", "deploy", f"--sysroot={sysroot}", "--os=rhel",
       f"edge:{composed_pair.ref}")
    status = sh("ostree", "admin", "status", f"--sysroot={sysroot}")
    assert f"rhel {composed_pair.commit2}.0" in status


# --- the read-back refuses what a device could not use ----------------------------------
def lba_of(iso: Path, inside: str) -> int:
    """The first 2048-byte block of a file inside the ISO (xorriso -report_lba)."""
    out = sh("xorriso", "-indev", iso, "-find", inside, "-exec", "report_lba")
    fields = [f.strip() for f in out.split("File data lba:")[1].split(",")]
    return int(fields[1])


def tamper(iso: Path, inside: str, edit: Any) -> None:
    """Rewrite a file's bytes in place (same length, same layout): what a bad disk or a
    bad copy does, which the read-back must catch."""
    start = lba_of(iso, inside) * 2048
    with iso.open("r+b") as handle:
        handle.seek(start)
        size = len(extract(iso, inside, iso.parent / "tampered-part").read_bytes())
        data = handle.read(size)
        new = edit(data)
        assert len(new) == len(data) and new != data
        handle.seek(start)
        handle.write(new)


@pytest.fixture
def verified(build_dir: Path, tmp_path: Path) -> tuple[Path, Any, Any]:
    """An installer ISO built on the stand-in boot ISO, its manifest and the boot listing;
    the unmodified ISO passes the read-back."""
    from builder.installer.manifest import Manifest
    from builder.installer.read_back import verify_iso

    boot = make_boot_iso(tmp_path)
    assert installer(build_dir, "--boot-iso", boot) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    on_iso = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    on_iso.pop("iso")
    manifest, listing = Manifest(**on_iso), list_iso(Runner(), boot)
    checks = verify_iso(Runner(), iso, manifest, tmp_path / "clean", boot_iso=listing)
    assert any("checkisomd5" in check for check in checks)
    sbom = json.loads(extract(iso, f"/{manifest.sbom}", tmp_path / "sbom.json").read_text())
    assert checks[1:] == [
        f"embedded repo passes `ostree fsck`; {manifest.ref} is {manifest.commit[:12]}, as in "
        "the manifest",
        "/ks.cfg passes pykickstart (RHEL 9)",
        f"/{manifest.sbom} describes commit {manifest.commit[:12]} "
        f"({len(sbom['packages'])} SPDX packages)",
        "every boot entry has inst.ks=; boot images kept (BIOS /isolinux/isolinux.bin, UEFI "
        "/images/efiboot.img); media checksum (checkisomd5) passes"]
    return iso, manifest, listing


def object_of(iso: Path, tmp_path: Path, suffix: str) -> str:
    listing = list_iso(Runner(), iso)
    return "/" + sorted(p for p in listing.files
                        if p.startswith("ostree/repo/objects/") and p.endswith(suffix))[0]


@pytest.mark.parametrize(("what", "message"), [
    ("object", "the embedded ostree repo fails `ostree fsck`"),
    ("kickstart", ".iso:/ks.cfg: rendered kickstart line 1: Unknown command: boguskstart"),
    ("boot-entry", "/isolinux/isolinux.cfg: a boot entry lacks inst.ks=hd:LABEL="),
    ("payload", "The media check is complete, the result is: FAIL."),
    ("grub-entry", "/EFI/BOOT/grub.cfg: a boot entry lacks inst.ks=hd:LABEL="),
    ("sbom-commit", "does not describe commit"),
    ("sbom-packages", "does not describe commit"),  # no packages: refused, not a crash
    ("sbom-checksums", "does not describe commit"),
    ("sbom-json", "is not readable JSON: Expecting value: line 1 column 1"),
])
def test_read_back_refuses_a_damaged_iso(verified: tuple[Path, Any, Any], tmp_path: Path,
                                         what: str, message: str) -> None:
    from builder.installer.read_back import verify_iso

    iso, manifest, listing = verified
    if what == "object":  # one byte of a directory tree object
        tamper(iso, object_of(iso, tmp_path, ".dirtree"),
               lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]))
    elif what == "kickstart":  # an unknown command pykickstart refuses
        tamper(iso, "/ks.cfg", lambda b: b"bogus" + b[5:])
    elif what == "boot-entry":  # the installer would boot without the kickstart
        tamper(iso, "/isolinux/isolinux.cfg", lambda b: b.replace(b"inst.ks=", b"inst.xx="))
    elif what == "grub-entry":  # the UEFI menu's linuxefi line
        tamper(iso, "/EFI/BOOT/grub.cfg", lambda b: b.replace(b"inst.ks=", b"inst.xx="))
    elif what in ("sbom-packages", "sbom-checksums"):  # a document without that list
        key = what.removeprefix("sbom-").encode()
        tamper(iso, f"/{manifest.sbom}",
               lambda b: b.replace(b'"' + key + b'"', b'"' + key[:-1] + b'X"'))
    elif what == "sbom-commit":  # an SBOM of another commit
        tamper(iso, f"/{manifest.sbom}", lambda b: b.replace(manifest.commit.encode(),
                                                             manifest.commit[::-1].encode()))
    elif what == "sbom-json":
        tamper(iso, f"/{manifest.sbom}", lambda b: b"X" + b[1:])
    else:  # a byte of the installer image: only the media checksum sees it
        tamper(iso, "/images/install.img", lambda b: b"\x01" + b[1:])
    with pytest.raises(BuildError) as caught:
        verify_iso(Runner(), iso, manifest, tmp_path / "verify", boot_iso=listing)
    assert message in str(caught.value), str(caught.value)


def test_read_back_refuses_boot_images_other_than_the_boot_iso_s(
        verified: tuple[Path, Any, Any], tmp_path: Path) -> None:
    from builder.installer.read_back import verify_iso

    iso, manifest, _ = verified
    (tmp_path / "other").mkdir()
    unbootable = tmp_path / "unbootable.iso"  # the same files, its boot records discarded
    sh("xorriso", "-indev", make_boot_iso(tmp_path / "other"), "-outdev", unbootable,
       "-boot_image", "any", "discard")
    with pytest.raises(BuildError, match=r"boot images changed from \[\] to \['BIOS "
                                         r"/isolinux/isolinux.bin', 'UEFI /images/efiboot.img'\]"):
        verify_iso(Runner(), iso, manifest, tmp_path / "verify",
                   boot_iso=list_iso(Runner(), unbootable))


def test_read_back_refuses_an_iso_without_its_kickstart(verified: tuple[Path, Any, Any],
                                                         tmp_path: Path) -> None:
    from builder.installer.read_back import verify_iso

    iso, manifest, listing = verified
    without = tmp_path / "without-ks.iso"
    sh("xorriso", "-indev", iso, "-outdev", without, "-boot_image", "any", "keep",
       "-rm", "/ks.cfg")
    with pytest.raises(BuildError, match=f"^{without}: /ks.cfg is missing from the written ISO"):
        verify_iso(Runner(), without, manifest, tmp_path / "verify", boot_iso=listing)
