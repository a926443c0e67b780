"""The accelerator probe's answer is kept for the host's boot (the VM tier runs the probe)."""

from __future__ import annotations

import json
from pathlib import Path

from builder.vm.qemu import _boot_id, _cached_probe


def test_a_probe_s_answer_holds_until_the_host_reboots(tmp_path: Path) -> None:
    cache = tmp_path / "accel.json"
    assert _cached_probe(cache) is None                    # never probed
    cache.write_text(json.dumps({"boot_id": _boot_id(), "accel": "tcg",
                                 "reason": "a KVM boot did not reach GRUB within 5s"}))
    accel, reason = _cached_probe(cache) or ("", "")
    assert accel == "tcg" and reason.startswith("a KVM boot did not reach GRUB within 5s")
    assert "probed earlier" in reason
    cache.write_text(json.dumps({"boot_id": "another-boot", "accel": "kvm", "reason": "x"}))
    assert _cached_probe(cache) is None                    # the host rebooted: probe again
    for garbage in ("{", "[]", json.dumps({"boot_id": _boot_id(), "accel": "hvf"})):
        cache.write_text(garbage)
        assert _cached_probe(cache) is None
