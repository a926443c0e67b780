"""Helpers for the component plugin and loader tests: rendered trees, network namespaces and
LVM volume groups on loop devices, each cleaned up however the test ends."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from builder.components.loader import COMPONENTS_DIR
from builder.core.templates import render_source_tree
from builder.release.catalog import BY_KEY
from builder.release.model import load_release
from builder.release.template_context import component_context
from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE

PLUGIN_KEYS = ("multus", "networking-ovnk", "networking-bridge", "storage-topolvm")
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LVM_SUPPRESS_FD_WARNINGS": "1",
    "MICROSHIFT_CLUSTER_CLUSTERCIDR": "10.42.0.0/16",
    "MICROSHIFT_CLUSTER_SERVICECIDR": "10.43.0.0/16",
    "MICROSHIFT_CLUSTER_SERVICENODEPORTRANGE": "30000-32767",
    "MICROSHIFT_CLUSTER_URL": "https://localhost:6443",
    "MICROSHIFT_NODEIP": "192.0.2.10",
    "MICROSHIFT_SUBJECTALTNAMES": "",
    "MICROSHIFT_LOGVLEVEL": "Normal",
    "MICROSHIFT_NODENAME": "edge-1",
    "MICROSHIFT_BASEDOMAIN": "example.com",
}
_names = itertools.count()


def render_components(dest: Path, keys: tuple[str, ...] = ("core", *PLUGIN_KEYS)) -> Path:
    """Render the packages' source trees into dest, exactly as the RPM build does."""
    release = load_release(RELEASE)
    for key in keys:
        render_source_tree(BY_KEY[key].package, component_context(release, key), dest)
    return dest


def plugin_dir(root: Path, key: str) -> Path:
    plugin = BY_KEY[key].plugin
    assert plugin is not None
    return root / COMPONENTS_DIR / plugin


def run_plugin(directory: Path, *args: str, sysroot: Path | None = None,
               env: Mapping[str, str] | None = None,
               netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a plugin the way the convention says: its directory as cwd, MICROSHIFT_* env."""
    full_env = {**BASE_ENV, **(env or {})}
    if sysroot is not None:
        full_env["MICROSHIFT_SYSROOT"] = str(sysroot)
    argv = [str(directory / "plugin"), *args]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, cwd=directory, env=full_env, capture_output=True, text=True,
                          check=False, timeout=60)


def run_loader(*args: str | Path, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m builder components run ...`, optionally inside a network namespace."""
    argv = [sys.executable, "-m", "builder", "components", "run", *map(str, args)]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False,
                          timeout=300, env={**os.environ, "LVM_SUPPRESS_FD_WARNINGS": "1"})


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@contextmanager
def network_namespace(*, br_ex: bool, br_ex_mtu: int = 1500) -> Iterator[str]:
    """A fresh network namespace whose default route holds 192.0.2.10 (on br-ex if wanted).

    Skips the test, with the reason, where the machine does not allow namespaces.
    """
    requires.need_root("network namespaces")
    requires.need_tools("ip")
    name = f"msb-test-{os.getpid()}-{next(_names)}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"{requires.NO_NETNS}: {made.stderr.strip()}")
    try:
        # A bridge is the one link type every kernel here has (dummy is a module).
        uplink = "br-ex" if br_ex else "uplink0"
        for step in (["link", "add", uplink, "mtu", str(br_ex_mtu), "type", "bridge"],
                     ["link", "set", uplink, "up"],
                     ["addr", "add", "192.0.2.10/24", "dev", uplink],
                     ["route", "add", "default", "via", "192.0.2.1"]):
            done = _ip("-n", name, *step)
            if done.returncode != 0:
                pytest.skip(f"{requires.NO_NETNS}: ip {' '.join(step)}: "
                            f"{done.stderr.strip()}")
        yield name
    finally:
        _ip("netns", "del", name)


def _lvm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False,
                          env={**os.environ, "LVM_SUPPRESS_FD_WARNINGS": "1"})


@contextmanager
def volume_group(workdir: Path) -> Iterator[str]:
    """A real LVM volume group on a 64 MiB loop device, removed afterwards.

    Skips the test, with the reason, where loop devices or LVM are not available.
    """
    requires.need_root("a loop device and a volume group")
    requires.need_tools("losetup", "pvcreate", "vgcreate", "vgremove")
    backing = workdir / "pv.img"
    with backing.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    attached = subprocess.run(["losetup", "--find", "--show", str(backing)],
                              capture_output=True, text=True, check=False)
    if attached.returncode != 0:
        backing.unlink()
        pytest.skip(f"{requires.NO_LOOP}: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    name = f"msbtest{os.getpid()}x{next(_names)}"
    try:
        created = _lvm("vgcreate", "--quiet", name, device)
        if created.returncode != 0:
            pytest.skip(f"{requires.NO_LOOP}: vgcreate: {created.stderr.strip()}")
        yield name
    finally:
        _lvm("vgremove", "--quiet", "--force", name)
        _lvm("pvremove", "--quiet", device)
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
        backing.unlink(missing_ok=True)
