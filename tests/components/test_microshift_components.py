"""microshift-components, the device side of the plugin loader: the zip application that
microshift-core ships, run from the built RPMs the way microshift-components.service runs it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.components.microshift_components import FAILURE_LOG, LINK, MANIFESTS
from builder.core.paths import PROJECT_ROOT, SOURCES_DIR
from tests.support import requires

ZIPAPP_SPEC = SOURCES_DIR / "microshift-core/usr/bin/microshift-components.zipapp.yaml"
RPMS = ("core", "networking-bridge", "multus")


@pytest.fixture
def device_root(built_release: Path, tmp_path: Path) -> Path:
    """core + bridge + Multus, extracted from the built RPMs: no br-ex or LVM needed."""
    root = tmp_path / "root"
    root.mkdir()
    for key in RPMS:
        [rpm] = (built_release / "rpms").glob(f"microshift-{key}-[0-9]*.rpm")
        cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True).stdout
        subprocess.run(["cpio", "-idm", "--quiet"], input=cpio, cwd=root, check=True)
    (root / "etc/microshift/config.yaml").write_text(
        "node: {nodeIP: 192.0.2.10, hostnameOverride: edge-1}\n")
    return root


def run_service(root: Path, python: str = "/usr/bin/python3",
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What the unit's ExecStart does, with the root the device simulation gives it."""
    argv = [python, str(root / "usr/bin/microshift-components"), "run"]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120,
                          env={"PATH": os.environ["PATH"], "MICROSHIFT_ROOT": str(root),
                               **(env or {})})


def kustomize(directory: Path) -> list[dict[str, object]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is a host tool: run ci/install-host-tools.sh"
    proc = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.mark.integration
def test_the_unit_runs_the_real_plugins_and_kubectl_accepts_the_kustomization(
        device_root: Path, tmp_path: Path) -> None:
    unit = (device_root / "usr/lib/systemd/system/microshift-components.service").read_text()
    assert "ExecStart=/usr/bin/microshift-components run" in unit
    assert "Before=microshift.service" in unit
    proc = run_service(device_root)
    assert proc.returncode == 0, proc.stderr
    out = device_root / MANIFESTS
    assert (out / "kustomization.yaml").is_file() and not (device_root / FAILURE_LOG).exists()
    # MicroShift reaches it through core's symlink in a default kustomize path: apply it the
    # way it would, through a link (kustomize must follow a symlinked root).
    link = device_root / LINK.lstrip("/")
    assert os.readlink(link) == f"/{MANIFESTS}"
    alias = tmp_path / "000-microshift-components"
    alias.symlink_to(out)
    objects = kustomize(alias)
    names = {(str(d["kind"]), str(d["metadata"]["name"])) for d in objects}  # type: ignore[index]
    assert {("DaemonSet", "multus"), ("DaemonSet", "bridge-cni"),
            ("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io"),
            } <= names
    assert objects == kustomize(out)


@pytest.mark.integration
def test_a_failing_plugin_fails_the_unit_with_its_message_and_leaves_no_manifests(
        device_root: Path) -> None:
    assert run_service(device_root).returncode == 0  # an earlier, good run of this boot
    broken = device_root / "usr/lib/microshift/components.d/003-broken"
    broken.mkdir()
    (broken / "plugin").write_text(
        '#!/bin/sh\n[ "$1" = api-version ] && { echo v1; exit 0; }\n'
        'echo "the frobnicator device /dev/frob0 is missing" >&2\nexit 1\n')
    (broken / "plugin").chmod(0o755)
    proc = run_service(device_root)
    assert proc.returncode == 1
    assert "plugin 003-broken failed with exit code 1: a system precondition is unmet" \
        in proc.stderr
    assert "the frobnicator device /dev/frob0 is missing" in proc.stderr
    failure = (device_root / FAILURE_LOG).read_text()
    assert "003-broken" in failure and "/dev/frob0 is missing" in failure
    # MicroShift must not apply a stale kustomization: the components did not come up.
    assert not (device_root / MANIFESTS).exists()


@pytest.mark.integration
def test_kustomize_paths_that_skip_the_components_are_refused(device_root: Path) -> None:
    config = device_root / "etc/microshift/config.yaml"
    config.write_text("manifests:\n  kustomizePaths: [/etc/microshift/manifests]\n")
    proc = run_service(device_root)
    assert proc.returncode == 2
    assert f"{config}: manifests.kustomizePaths: no entry reads {LINK}" in proc.stderr
    config.write_text("manifests:\n  kustomizePaths:\n    - /usr/lib/microshift/manifests.d/*\n")
    assert run_service(device_root).returncode == 0


@pytest.mark.integration
def test_the_shipped_program_runs_on_python_3_9_as_on_rhel_9(device_root: Path,
                                                              tmp_path: Path) -> None:
    python39 = find_python39()
    if python39 is None:
        pytest.skip(f"{requires.NO_PYTHON39}: RHEL 9's system Python (Debian 12 packages none)")
    # PyYAML's pure-Python part, as python3-pyyaml provides it on the device.
    site = tmp_path / "site"
    shutil.copytree(Path(yaml.__file__).parent, site / "yaml")
    proc = run_service(device_root, python39, env={"PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    assert (device_root / MANIFESTS / "004-multus.yaml").is_file()


def find_python39() -> str | None:
    """A working python3.9: on PATH, or a pyenv installation (whose shim may not select it)."""
    candidates = [shutil.which("python3.9"), "/usr/bin/python3.9",
                  *map(str, sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9")))]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and subprocess.run(
                [candidate, "-c", ""], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_the_zip_application_holds_every_module_it_imports() -> None:
    listed = set(yaml.safe_load(ZIPAPP_SPEC.read_text())["modules"])
    for module in sorted(listed):
        tree = ast.parse((PROJECT_ROOT / module).read_text())
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.startswith("builder"):
                    path = name.replace(".", "/")
                    assert f"{path}.py" in listed or f"{path}/__init__.py" in listed, \
                        f"{module} imports {name}, which the zip application lacks"


def test_the_zip_application_is_byte_identical_from_two_builds(tmp_path: Path) -> None:
    from builder.core.zipapp import build_zipapp

    first = build_zipapp(ZIPAPP_SPEC)
    assert first.startswith(b"#!/usr/bin/python3 -I\n")
    assert build_zipapp(ZIPAPP_SPEC) == first
    app = tmp_path / "microshift-components"
    app.write_bytes(first)
    proc = subprocess.run([sys.executable, str(app), "--help"], capture_output=True,
                          text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0 and "microshift-components" in proc.stdout
