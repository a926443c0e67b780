"""Upstream greenboot in the SAMPLE base: the released files as pinned, refused when they
differ, installed as its package does, and its GRUB scripts working with Debian's
grub-editenv through the base's `grub2-editenv` link (run for real, in a mount namespace
where /usr has greenboot and the link, and /boot is a scratch directory)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.baseos import greenboot
from builder.core.errors import BuildError
from builder.core.runner import find_tool
from tests.support import requires

# greenboot.spec's %post of the greenboot package (0.15): the units it enables.
ENABLED_UPSTREAM = {
    "greenboot-healthcheck.service", "greenboot-loading-message.service",
    "greenboot-task-runner.service", "redboot-task-runner.service", "redboot.target",
    "greenboot-status.service", "greenboot-grub2-set-counter.service",
    "greenboot-grub2-set-success.service", "greenboot-rpm-ostree-grub2-check-fallback.service",
    "redboot-auto-reboot.service"}


def test_the_vendored_release_matches_its_pins() -> None:
    release = greenboot.verified()
    assert release.tag.startswith("v0.15.") and len(release.commit) == 40
    assert set(release.units) == ENABLED_UPSTREAM
    executables = {name for name, (_, mode) in release.files.items() if mode == "0755"}
    assert "usr/libexec/greenboot/greenboot" in executables
    assert "usr/libexec/greenboot/greenboot-rpm-ostree-grub2-check-fallback" in executables
    assert not any(name.startswith(greenboot.UNITS) for name in executables)


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    source, pins = tmp_path / "greenboot", tmp_path / "greenboot.json"
    shutil.copytree(greenboot.FILES, source)
    shutil.copy(greenboot.PINS, pins)
    return source, pins


def test_a_changed_missing_or_extra_file_stops_the_build(tmp_path: Path) -> None:
    source, pins = _copy(tmp_path)
    script = source / "usr/libexec/greenboot/greenboot-grub2-set-counter"
    script.write_bytes(script.read_bytes().replace(b"max_boot_attempts=3", b"max_boot_attempts=9"))
    with pytest.raises(BuildError, match=r"greenboot-grub2-set-counter: sha256 [0-9a-f]{64} "
                                         r"is not greenboot v0\.15\.\d+'s"):
        greenboot.verified(source, pins)
    shutil.copy(greenboot.FILES / "usr/libexec/greenboot/greenboot-grub2-set-counter", script)
    (source / "usr/libexec/greenboot/extra-check").write_text("#!/bin/sh\n")
    with pytest.raises(BuildError, match=r"extra-check: not a file of greenboot v0\.15"):
        greenboot.verified(source, pins)
    (source / "usr/libexec/greenboot/extra-check").unlink()
    (source / "usr/libexec/greenboot/greenboot-status").unlink()
    with pytest.raises(BuildError, match=r"greenboot-status: missing"):
        greenboot.verified(source, pins)


def test_a_pin_list_with_a_bad_entry_is_named(tmp_path: Path) -> None:
    source, pins = _copy(tmp_path)
    doc = json.loads(pins.read_text())
    doc["files"]["usr/libexec/greenboot/greenboot"]["mode"] = "4755"
    pins.write_text(json.dumps(doc))
    with pytest.raises(BuildError, match=r"files\.usr/libexec/greenboot/greenboot: .*'4755'"):
        greenboot.verified(source, pins)
    pins.write_text("{}")
    with pytest.raises(BuildError, match="not greenboot's pin list"):
        greenboot.verified(source, pins)


def test_install_lays_the_files_out_as_the_package_does(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    release = greenboot.verified()
    greenboot.install(tree, release)
    runner = tree / "usr/libexec/greenboot/greenboot"
    assert runner.stat().st_mode & 0o777 == 0o755
    assert (tree / "usr/lib/systemd/system/greenboot-healthcheck.service").stat().st_mode \
        & 0o777 == 0o644
    assert (tree / "usr/share/licenses/greenboot/LICENSE").is_file()
    assert not (tree / "LICENSE").exists()
    assert len([p for p in tree.rglob("*") if p.is_file()]) == len(release.files)


@pytest.fixture
def boot_namespace(tmp_path: Path) -> Path:
    """A scratch /boot laid out as the disk image's (/boot/grub -> grub2, an empty grubenv)
    and a /usr overlay with greenboot installed and the base's grub2-editenv link, for
    `_in_namespace`."""
    requires.need_tools("unshare")
    if find_tool("grub-editenv") is None and find_tool("grub2-editenv") is None:
        requires.need_tools("grub-editenv")
    greenboot.install(tmp_path / "tree", greenboot.verified())
    (tmp_path / "work").mkdir()
    (tmp_path / "boot/grub2").mkdir(parents=True)
    (tmp_path / "tree/usr/bin").mkdir()
    if find_tool("grub2-editenv") is None:  # Debian: the base's link; Fedora has its own
        (tmp_path / "tree/usr/bin/grub2-editenv").symlink_to("grub-editenv")
    (tmp_path / "boot/grub").symlink_to("grub2")
    subprocess.run([_editenv(), str(tmp_path / "boot/grub2/grubenv"), "create"], check=True)
    return tmp_path


def _in_namespace(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` (bash) in a private mount namespace with `boot_namespace`'s mounts."""
    setup = (f"mount -t overlay overlay -o lowerdir=/usr,upperdir={root / 'tree/usr'},"
             f"workdir={root / 'work'} /usr && mount --bind {root / 'boot'} /boot && ")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                           setup + script], check=False, capture_output=True, text=True,
                          timeout=60)


def _editenv() -> str:
    return find_tool("grub-editenv") or find_tool("grub2-editenv") or "grub-editenv"


def _grubenv(tmp_path: Path) -> dict[str, str]:
    listing = subprocess.run([_editenv(), str(tmp_path / "boot/grub2/grubenv"), "list"],
                             check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in listing.splitlines())


@requires.root_only("mounts an overlay on /usr and /boot in a private mount namespace")
def test_upstream_counter_and_success_scripts_work_with_debians_grub_editenv(
        boot_namespace: Path) -> None:
    tmp_path = boot_namespace
    libexec = "/usr/libexec/greenboot"
    staged = _in_namespace(tmp_path, f"bash {libexec}/greenboot-grub2-set-counter 2")
    assert staged.returncode == 0, staged.stderr
    assert _grubenv(tmp_path) == {"boot_counter": "2", "boot_success": "0"}
    healthy = _in_namespace(tmp_path, f"bash {libexec}/greenboot-grub2-set-success")
    assert healthy.returncode == 0, healthy.stderr
    assert _grubenv(tmp_path) == {"boot_success": "1"}


@requires.root_only("mounts an overlay on /usr and /boot in a private mount namespace")
def test_upstream_redboot_asks_for_a_person_when_grub_has_nothing_left(
        boot_namespace: Path) -> None:
    """A red boot with no counter (not an update) or after the fallback must not reboot."""
    tmp_path = boot_namespace
    libexec = "/usr/libexec/greenboot"
    unset = _in_namespace(tmp_path, f"bash {libexec}/redboot-auto-reboot")
    assert unset.returncode == 1 and "boot_counter is unset" in unset.stdout
    subprocess.run([_editenv(), str(tmp_path / "boot/grub2/grubenv"), "set",
                    "boot_counter=-1"], check=True)
    fallen = _in_namespace(tmp_path, f"bash {libexec}/redboot-auto-reboot")
    assert fallen.returncode == 2 and "Manual intervention necessary" in fallen.stdout
