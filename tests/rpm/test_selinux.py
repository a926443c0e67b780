"""microshift-selinux: the compiled policy module, loaded into the SAMPLE policy with the real
semodule in a scratch store and inspected with setools' sesearch/seinfo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.core.runner import find_tool
from builder.core.selinux import binary_policy
from tests.support.cli import extract_rpm, rpm_query

pytestmark = pytest.mark.integration

MODULE = "usr/share/selinux/packages/targeted/microshift.pp.bz2"
CONTAINER_MODULE = "usr/share/selinux/packages/targeted/container.pp.bz2"


def package(build: Path, name: str) -> Path:
    [path] = [*(build / "rpms").glob(f"{name}-4.14.2-1.*.rpm"),
              *(build / "sample-base" / "rpms").glob(f"{name}-9.2.sample-1.*.rpm")]
    return path


def semodule(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # In /usr/sbin, which is not on an unprivileged Debian user's PATH.
    return subprocess.run([find_tool("semodule") or "semodule", "-p", str(root), "-s",
                           "targeted", "-n", *args], capture_output=True, text=True, check=False)


def sesearch(policy: Path, *args: str) -> list[str]:
    out = subprocess.run(["sesearch", *args, str(policy)], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.strip() for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def scratch_policy(built_release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch root holding the SAMPLE policy as the sample base ships it (the store in
    /etc/selinux, container-selinux's module in it), that module (re)installed from its
    package as the package's %post would."""
    work = tmp_path_factory.mktemp("scratch-policy")
    root = extract_rpm(package(built_release, "selinux-policy-targeted"), work)
    assert "container" in semodule(root, "--list-modules=full").stdout.split()
    container = extract_rpm(package(built_release, "container-selinux"), work)
    proc = semodule(root, "-X", "200", "-i", str(container / CONTAINER_MODULE))
    assert proc.returncode == 0, proc.stderr
    return root


def test_package_ships_the_compiled_module_and_its_interface(built_release: Path) -> None:
    rpm = package(built_release, "microshift-selinux")
    assert rpm.name.endswith(".noarch.rpm")
    assert rpm_query("-qp", "--list", rpm).split() == [
        "/usr/share/selinux/devel/include/distributed/microshift.if", "/" + MODULE]
    requires = rpm_query("-qp", "--requires", rpm).split()
    assert {"container-selinux", "selinux-policy-targeted", "policycoreutils"} <= set(requires)
    # Package-mode installs load it with semodule; composes do that declaratively.
    assert "semodule -n -s targeted -X 200 -i /" + MODULE in rpm_query("-qp", "--scripts", rpm)


def test_module_loads_into_the_sample_policy_and_its_rules_are_in_the_rebuilt_policy(
        built_release: Path, scratch_policy: Path, tmp_path: Path) -> None:
    module = extract_rpm(package(built_release, "microshift-selinux"), tmp_path) / MODULE
    proc = semodule(scratch_policy, "-X", "200", "-i", str(module))
    assert proc.returncode == 0, proc.stderr
    listed = semodule(scratch_policy, "--list-modules=full").stdout.split()
    assert "microshift" in listed and "container" in listed
    policy = binary_policy(scratch_policy / "etc/selinux/targeted")
    assert policy is not None
    assert sesearch(policy, "-T", "-s", "kubelet_t", "-t", "var_lib_t", "-c", "dir") == sorted(
        f"type_transition kubelet_t var_lib_t:dir container_var_lib_t {name};"
        for name in ("microshift", "microshift-backups", "microshift.saved"))
    types = subprocess.run(["seinfo", "-t", "microshift_update_var_lib_t", str(policy)],
                           capture_output=True, text=True, check=True).stdout
    assert "microshift_update_var_lib_t" in types.split()
    # A confined container gets nothing on MicroShift's data, configuration or updater state.
    for target in ("container_var_lib_t", "kubernetes_file_t", "microshift_update_var_lib_t"):
        assert sesearch(policy, "-A", "-s", "container_t", "-t", target) == []


def test_module_does_not_load_without_container_selinux(built_release: Path,
                                                         tmp_path: Path) -> None:
    # Why microshift-selinux requires container-selinux: its file contexts use its types.
    root = extract_rpm(package(built_release, "selinux-policy-targeted"), tmp_path)
    proc = semodule(root, "-X", "200", "-r", "container")
    assert proc.returncode == 0, proc.stderr
    module = extract_rpm(package(built_release, "microshift-selinux"), tmp_path) / MODULE
    proc = semodule(root, "-X", "200", "-i", str(module))
    assert proc.returncode != 0
    assert "microshift" in proc.stderr
    assert "microshift" not in semodule(root, "--list-modules=full").stdout
