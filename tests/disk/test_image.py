"""Disk images: an ostree deployment that GRUB boots, the same bytes from the same inputs.

A small commit laid out as the SAMPLE bootable base lays out its tree (a kernel and an
initramfs under /usr/lib/modules/KVER/, /usr/etc, the base's GRUB menu generator) stands in
for the 400 MiB base here; the VM tier (tests/vm/) boots the real one."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from builder.baseos.debian import BOOTC_STANDIN
from builder.bootc.sample_images import single_image
from builder.context import Context
from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.paths import BASEOS_DIR
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.disk.deployment import GENERATOR, Deployment, ImageSource
from builder.disk.grub import PLATFORM_DIR
from builder.disk.image import BOOT_SIZE, FIRST_SECTOR, build_disk
from tests.support import requires
from tests.support.cli import RELEASE

pytestmark = [pytest.mark.integration,
              requires.root_only("the deployed files keep their owners")]
REF = "sample/x86_64/disk-test"
KVER = "6.1.0-sample"
EPOCH = 1700000000


def small_commit(tmp_path: Path, *, generator: bool = True, grub: Path | None = None,
                 files: Mapping[str, Path] | None = None) -> tuple[Repo, str]:
    """`grub`: a directory of GRUB modules the commit carries in /usr/lib/grub/NAME;
    `files`: the tree's files from others (path in the tree -> file), the kernel too."""
    tree = tmp_path / "tree"
    modules = tree / "usr/lib/modules" / KVER
    modules.mkdir(parents=True)
    if grub is not None:
        shutil.copytree(grub, tree / "usr/lib/grub" / grub.name)
    (modules / "vmlinuz").write_bytes(b"SAMPLE kernel for the disk image test\n")
    (modules / "initramfs.img").write_bytes(b"SAMPLE initramfs\n")
    for name, source in (files or {}).items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tree / name)
    (tree / "usr/etc").mkdir()
    (tree / "usr/etc/os-release").write_text('NAME="Disk test"\nPRETTY_NAME="Disk test"\n')
    if generator:
        target = tree / GENERATOR.lstrip("/")
        target.parent.mkdir(parents=True)
        target.write_bytes((BASEOS_DIR / "overlay" / GENERATOR.lstrip("/")).read_bytes())
        target.chmod(0o755)
    repo = Repo(tmp_path / "repo", Runner())
    repo.init("archive")
    commit = repo.commit(tree, subject="disk test", timestamp=EPOCH, parent=None,
                         bind_ref=REF, metadata={"version": "1"})
    repo.set_ref(REF, commit)
    return repo, commit


def debugfs_cat(image: str, path: str) -> str:
    return subprocess.run(["debugfs", "-R", f"cat {path}", image], capture_output=True,
                          text=True, check=True).stdout


def test_the_disk_boots_the_commit_through_grub_and_is_the_same_bytes_twice(
        tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path)
    key = tmp_path / "key.asc"
    key.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\nSAMPLE\n")
    deployment = Deployment(repo.path, REF, commit, remote_url="http://10.0.2.100/repo/",
                            gpg_key=key, etc_files={"greenboot/greenboot.conf": b"X=1\n"})
    first = build_disk(Runner(), deployment, tmp_path / "a", "test.x86_64", epoch=EPOCH,
                       firmware="bios")
    second = build_disk(Runner(), deployment, tmp_path / "b", "test.x86_64", epoch=EPOCH,
                        firmware="bios")
    assert first.raw.read_bytes() == second.raw.read_bytes()
    assert first.qcow2 and second.qcow2 and first.qcow2.read_bytes() == second.qcow2.read_bytes()
    again = build_disk(Runner(), deployment, tmp_path / "a", "test.x86_64", epoch=EPOCH,
                       firmware="bios")
    assert not again.built and again.raw == first.raw

    raw = first.raw.read_bytes()
    boot_code = (PLATFORM_DIR / "boot.img").read_bytes()
    assert raw[:0x66] == boot_code[:0x66] and raw[0x66:0x68] == b"\x90\x90"
    assert raw[510:512] == b"\x55\xaa" and raw[512:1024] != bytes(512)  # GRUB's core image
    # Each partition as e2fsprogs reads one inside a disk image: at its offset.
    boot = f"{first.raw}?offset={FIRST_SECTOR * 512}"
    root = f"{first.raw}?offset={FIRST_SECTOR * 512 + BOOT_SIZE}"
    for fs in (boot, root):
        subprocess.run(["e2fsck", "-fn", fs], check=True, capture_output=True)
    menu = debugfs_cat(boot, "/loader/grub.cfg")
    assert f"root=UUID={first.root_uuid}" in menu and f"vmlinuz-{KVER}" in menu
    assert "set boot_counter=-1" in menu  # greenboot's fallback counting
    assert debugfs_cat(boot, "/grub2/grubenv").startswith("# GRUB Environment Block")
    deployed = f"/ostree/deploy/edge/deploy/{commit}.0"
    assert debugfs_cat(root, f"{deployed}/etc/fstab") == \
        f"UUID={first.boot_uuid} /boot ext4 defaults 0 2\n"
    assert debugfs_cat(root, f"{deployed}/etc/pki/ostree/edge.gpg") == key.read_text()
    assert debugfs_cat(root, f"{deployed}/etc/greenboot/greenboot.conf") == "X=1\n"
    config = debugfs_cat(root, "/ostree/repo/config")
    assert 'url=http://10.0.2.100/repo/' in config and "gpg-verify=true" in config
    assert debugfs_cat(root, f"{deployed}.origin").strip().endswith(f"refspec=edge:{REF}")


def test_a_commit_without_the_base_s_menu_generator_is_refused_in_one_line(
        tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path, generator=False)
    with pytest.raises(BuildError) as caught:
        build_disk(Runner(), Deployment(repo.path, REF, commit), tmp_path / "out", "x",
                   epoch=EPOCH)
    assert "SAMPLE bootable base" in caught.value.message
    assert "edge-raw-image" in (caught.value.hint or "")
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # nothing half-written


def test_a_disk_installed_from_a_bootc_image_deploys_the_image_with_its_origin(
        tmp_path: Path) -> None:
    """As `bootc install` (and the kickstart's ostreecontainer): the device's bootc imports
    the image into the sysroot's repository; the deployment is that import, its origin
    names the image, and the policy in /etc lets the device take only signed images."""
    repo, commit = small_commit(tmp_path)
    ctx = Context(build_dir=tmp_path / "build", release_path=RELEASE, progress=Progress())
    digest = single_image(ctx, repo.path, commit, "1", tmp_path / "oci")
    source = ImageSource(tmp_path / "oci/image", "registry.sample/microshift/disk-test:1",
                         digest, BOOTC_STANDIN)
    deployment = Deployment(repo.path, REF, commit, image=source,
                            etc_files={"containers/policy.json": b"{}\n"})
    image = build_disk(Runner(), deployment, tmp_path / "a", "test.x86_64", epoch=EPOCH,
                       firmware="bios", qcow2=False)
    root = f"{image.raw}?offset={FIRST_SECTOR * 512 + BOOT_SIZE}"
    listing = subprocess.run(["debugfs", "-R", "ls /ostree/deploy/edge/deploy", root],
                             capture_output=True, text=True, check=True).stdout.split()
    [deployed] = [name for name in listing if name.endswith(".0")]
    assert deployed != f"{commit}.0"   # the image's import, not the commit
    origin = debugfs_cat(root, f"/ostree/deploy/edge/deploy/{deployed}.origin")
    assert "container-image-reference=ostree-image-signed:docker://registry.sample/" \
           "microshift/disk-test:1" in origin
    assert debugfs_cat(root, f"/ostree/deploy/edge/deploy/{deployed}/usr/lib/modules/"
                             f"{KVER}/vmlinuz").startswith("SAMPLE kernel")
    assert debugfs_cat(root, f"/ostree/deploy/edge/deploy/{deployed}/etc/containers/"
                             "policy.json") == "{}\n"
    menu = debugfs_cat(f"{image.raw}?offset={FIRST_SECTOR * 512}", "/loader/grub.cfg")
    assert "ostree=/ostree/boot.1/edge/" in menu
