"""The simulated device in image mode: `bootc` (the SAMPLE stand-in, builder/device/standins/
bootc) run as the device's own scripts run it, and the container policy an image-mode device
ships (/etc/containers/policy.json: only the release's images, signed by its key), as
DIR/bootc/device/ writes it for real devices (builder/bootc/registry.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.device.boot import script_env
from builder.device.sysroot import Device

POLICY_KEY = "etc/pki/containers/microshift-release.gpg"


def bootc(device: Device, *args: str) -> subprocess.CompletedProcess[str]:
    root = device.state_dir / "root"
    env = {**os.environ, **script_env(device, root)}
    return subprocess.run(["bootc", *args], env=env, capture_output=True, text=True,
                          check=False)


def bootc_status(device: Device) -> dict[str, Any]:
    proc = bootc(device, "status", "--json")
    if proc.returncode != 0:
        raise BuildError(f"bootc status failed on the simulated device: {proc.stderr.strip()}")
    status: dict[str, Any] = json.loads(proc.stdout)
    return status


def switch(device: Device, layout: Path) -> None:
    """`bootc switch --transport oci LAYOUT`: staged, booted at the next boot."""
    proc = bootc(device, "switch", "--transport", "oci", str(layout))
    if proc.returncode != 0:
        raise BuildError(f"bootc switch to {layout} failed: {proc.stderr.strip()}")


def trust(device: Device, key: Path, scope: str) -> None:
    """A policy accepting only `scope`'s images signed by `key`, in the device's /etc."""
    root = device.state_dir / "root"
    (root / POLICY_KEY).parent.mkdir(parents=True, exist_ok=True)
    (root / POLICY_KEY).write_bytes(key.read_bytes())
    policy = {"default": [{"type": "reject"}], "transports": {"docker": {scope: [
        {"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/" + POLICY_KEY}]}}}
    (root / "etc/containers").mkdir(parents=True, exist_ok=True)
    (root / "etc/containers/policy.json").write_text(json.dumps(policy))
