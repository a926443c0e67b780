"""Reading a boot from the guest's console (the VM tier boots real ones)."""

from __future__ import annotations

from builder.vm.boots import BootRecord
from builder.vm.qemu import _clean

COMMIT = "02477af9894d92f5d847e4fae5a98c7a1f8ef9000fce2659946953ac34c360ce"
GREEN_BOOT = [
    "\x1b[H\x1b[J\x1b[1;1Hgrub: entry 0 boot_counter=2\r",
    f"sample-boot-report: booted commit={COMMIT} version=4.14.3-1",
    "[   44.3] greenboot[439]: Running Required Health Check Scripts...",
    "[   48.1] greenboot-status[466]: greenboot: Boot Status is GREEN - Health Check SUCCESS",
]


def record(lines: list[str]) -> BootRecord:
    boot = BootRecord(1)
    for line in lines:
        boot.read(_clean(line))
    return boot


def test_grub_s_line_the_booted_commit_and_greenboot_s_verdict_are_read() -> None:
    boot = record(GREEN_BOOT)
    assert (boot.entry, boot.boot_counter, boot.commit, boot.version, boot.verdict) == \
        (0, 2, COMMIT, "4.14.3-1", "green")
    assert record(["grub: entry 1 boot_counter=-1"]).boot_counter == -1
    assert record(["grub: entry 0 boot_counter="]).boot_counter is None
    assert boot.image is None   # a deployment made from a commit


def test_an_image_deployment_s_boot_report_names_its_manifest_digest() -> None:
    digest = "sha256:" + "ab" * 32
    boot = record([f"sample-boot-report: booted commit={COMMIT} version=4.14.3-1 "
                   f"image={digest}"])
    assert (boot.commit, boot.version, boot.image) == (COMMIT, "4.14.3-1", digest)


def test_a_green_boot_settles_once_the_updater_has_nothing_to_stage() -> None:
    boot = record(GREEN_BOOT)
    assert not boot.settled()
    boot.read("[ 60.2] microshift-update[512]: microshift-update: booted 02477af9894d of "
              "edge:microshift/x86_64/microshift-minimal")
    assert not boot.settled()
    boot.read("[ 61.0] microshift-update[512]: microshift-update: staged 1234567890ab "
              "(delta-file); it boots at the next reboot")
    assert not boot.settled()  # it reboots into v2: the boot ends with QEMU's exit
    idle = record(GREEN_BOOT)
    idle.read("microshift-update[9]: microshift-update: up to date: 02477af9894d is the newest")
    assert idle.settled()
    assert idle.updater == ["up to date: 02477af9894d is the newest"]
    rolled_back = record(GREEN_BOOT)
    rolled_back.read("microshift-update[9]: microshift-update: db12cea75db7 was rolled back by "
                     "greenboot on this device; waiting for a newer commit")
    assert rolled_back.settled()


def test_the_migrate_scenario_s_admin_settles_a_green_boot_only_when_done() -> None:
    boot = record(GREEN_BOOT)
    boot.read("sample-admin[620]: sample-admin: switched to the image; rebooting")
    assert not boot.settled() and boot.admin == ["switched to the image; rebooting"]
    boot.read("sample-admin[700]: sample-admin: done: nothing left to do")
    assert boot.settled()
    red = record(["greenboot-status[1]: greenboot: Boot Status is RED - Health Check FAILURE!",
                  "sample-admin[2]: sample-admin: done: nothing left to do"])
    assert not red.settled()


def test_a_red_boot_never_settles_on_the_updater_s_word() -> None:
    boot = record(["grub: entry 0 boot_counter=1",
                   "greenboot-status[1]: greenboot: Boot Status is RED - Health Check FAILURE!",
                   "microshift-update[2]: microshift-update: up to date: x is the newest"])
    assert boot.verdict == "red" and not boot.settled()


def test_console_escapes_and_carriage_returns_are_removed() -> None:
    assert _clean("\x1b[0;32m  OK  \x1b[0m] Reached target\r") == "  OK  ] Reached target"
