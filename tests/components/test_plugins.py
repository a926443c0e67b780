"""The component plugins of seed 003's calling convention, run as MicroShift runs them.

Every test runs the plugins of the rendered package source trees, which is exactly what the
RPMs ship (render_source_tree is what the RPM build uses).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.release.model import load_release
from tests.components.support import (
    PLUGIN_KEYS,
    RELEASE,
    network_namespace,
    plugin_dir,
    render_components,
    run_plugin,
    volume_group,
)
from tests.support import requires

PYTHON_PLUGINS = ("networking-ovnk", "storage-topolvm")
SHELL_PLUGINS = ("multus", "networking-bridge")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """core + every component package, rendered once for the module (read-only)."""
    return render_components(tmp_path_factory.mktemp("rendered"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A private rendered tree, for tests that change configuration files."""
    return render_components(tmp_path / "root")


def documents(stream: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}"
    return matches[0]


# ---- the convention, for every plugin --------------------------------------------------------

@pytest.mark.parametrize("key", PLUGIN_KEYS)
def test_every_plugin_answers_api_version(tree: Path, key: str) -> None:
    proc = run_plugin(plugin_dir(tree, key), "api-version")
    assert (proc.returncode, proc.stdout) == (0, "v1\n")


@pytest.mark.parametrize("key", PLUGIN_KEYS)
@pytest.mark.parametrize("args", [(), ("install",), ("run", "extra")])
def test_wrong_invocation_is_a_usage_error(tree: Path, key: str, args: tuple[str, ...]) -> None:
    proc = run_plugin(plugin_dir(tree, key), *args)
    assert proc.returncode == 2
    assert "usage: plugin api-version|run" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("key", PLUGIN_KEYS)
def test_plugins_are_executable_and_carry_a_shebang(tree: Path, key: str) -> None:
    plugin = plugin_dir(tree, key) / "plugin"
    assert plugin.stat().st_mode & 0o111 == 0o111
    first = plugin.read_text().splitlines()[0]
    expected = "#!/usr/bin/python3" if key in PYTHON_PLUGINS else "#!/bin/bash"
    assert first == expected


@pytest.mark.integration
@pytest.mark.parametrize("key", SHELL_PLUGINS)
def test_shell_plugins_are_shellcheck_clean(tree: Path, key: str) -> None:
    requires.need_tools("shellcheck")
    proc = subprocess.run(["shellcheck", "--shell=bash", str(plugin_dir(tree, key) / "plugin")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("key", PYTHON_PLUGINS)
def test_python_plugins_import_only_the_standard_library(tree: Path, key: str) -> None:
    # The device's python3 has no PyYAML or anything else from PyPI.
    module = ast.parse((plugin_dir(tree, key) / "plugin").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(module)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(module)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= sys.stdlib_module_names


def test_python_plugins_share_identical_helpers(tree: Path) -> None:
    def helpers(key: str) -> str:
        text = (plugin_dir(tree, key) / "plugin").read_text()
        match = re.search(r"# ---- begin shared plugin helpers ----\n.*"
                          r"# ---- end shared plugin helpers ----\n", text, re.S)
        assert match is not None
        return match.group(0)

    assert helpers("networking-ovnk") == helpers("storage-topolvm")


@pytest.mark.parametrize("key", PLUGIN_KEYS)
def test_manifest_images_are_exactly_the_release_images(tree: Path, key: str) -> None:
    expected = {image.ref for image in load_release(RELEASE).component(key).images}
    found = set()
    for manifest in plugin_dir(tree, key).glob("*.yaml"):
        found |= set(re.findall(r"^\s*image:\s*(\S+)\s*$", manifest.read_text(), re.M))
    assert found == expected
    assert all("@sha256:" in ref for ref in found)


@pytest.mark.integration
@pytest.mark.parametrize("key", PLUGIN_KEYS)
def test_kustomization_builds_with_kustomize_to_the_static_objects(tree: Path, key: str) -> None:
    requires.need_tools("kubectl")  # its built-in kustomize
    directory = plugin_dir(tree, key)
    built = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True,
                           text=True, check=True).stdout
    # The plugin's printout = the kustomize build + the objects generated from configuration.
    printed = plugin_static_documents(directory)
    assert sorted(map(identity, documents(built))) == sorted(map(identity, printed))


def plugin_static_documents(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"]
            for doc in documents((directory / name).read_text())]


def identity(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]


# ---- OVN-Kubernetes --------------------------------------------------------------------------

def write_ovn(root: Path, text: str) -> None:
    (root / "etc/microshift/ovn.yaml").write_text(text)


def test_ovnk_mtu_out_of_range_exits_2_naming_field_and_range(root: Path) -> None:
    write_ovn(root, "disableOVSInit: false\nmtu: 99999\n")
    proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "ovn.yaml: mtu: 99999 is out of range" in proc.stderr
    assert "allowed: an integer from 1280 to 65535" in proc.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("mtu: 1400\nmaxMTU: 9000\n",
     "maxMTU: unknown field; did you mean `mtu`? allowed: disableOVSInit, mtu"),
    ("mtu: 1000\n", "mtu: 1000 is out of range"),
    ("mtu: '1400'\n", "mtu: '1400' is out of range"),
    ("mtu: 1400.5\n", "mtu: '1400.5' is out of range"),
    ("disableOVSInit: yes\n", "disableOVSInit: 'yes' is not allowed; allowed: true or false"),
    ("mtu: 01400\n", "leading zero"),
    ("mtu: 1400\nmtu: 1300\n", "mtu: given twice"),
    ("mtu: &m 1400\n", "unsupported YAML"),
    ("mtu: [1400]\n", "unsupported YAML"),
    ("ovn:\n  mtu: 1400\n", "unexpected indentation"),
    ("\tmtu: 1400\n", "tabs are not allowed"),
    ("mtu 1400\n", "expected `key: value`"),
    ("mtu: 1400\n---\nmtu: 1300\n", "only one YAML document"),
])
def test_ovnk_rejects_bad_ovn_yaml_with_exit_2(root: Path, text: str, message: str) -> None:
    write_ovn(root, text)
    proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and str(root / "etc/microshift/ovn.yaml") in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("MICROSHIFT_CLUSTER_CLUSTERCIDR", "", "MICROSHIFT_CLUSTER_CLUSTERCIDR is not set"),
    ("MICROSHIFT_CLUSTER_SERVICECIDR", "10.43.0.1/16", "is not a network CIDR"),
    ("MICROSHIFT_CLUSTER_URL", "http://localhost:6443", "is not an https:// URL"),
    ("MICROSHIFT_LOGVLEVEL", "Chatty", "allowed: Normal, Debug, Trace, TraceAll"),
])
def test_ovnk_rejects_bad_environment_with_exit_2(tree: Path, variable: str, value: str,
                                                   message: str) -> None:
    proc = run_plugin(plugin_dir(tree, "networking-ovnk"), "run", sysroot=tree,
                      env={variable: value})
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.integration
def test_ovnk_without_br_ex_exits_1_naming_the_service_to_check(tree: Path) -> None:
    with network_namespace(br_ex=False) as netns:
        proc = run_plugin(plugin_dir(tree, "networking-ovnk"), "run", sysroot=tree, netns=netns)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "the OVS gateway bridge br-ex does not exist" in proc.stderr
    assert "microshift-ovs-init.service" in proc.stderr


@pytest.mark.integration
def test_ovnk_without_br_ex_and_ovs_init_disabled_gives_the_manual_steps(root: Path) -> None:
    write_ovn(root, "disableOVSInit: true\n")
    with network_namespace(br_ex=False) as netns:
        proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root, netns=netns)
    assert proc.returncode == 1
    for step in ("ovs-vsctl add-br br-ex", "ovs-vsctl add-port br-ex", "ip link set br-ex up"):
        assert step in proc.stderr


@pytest.mark.integration
def test_ovnk_with_br_ex_puts_mtu_and_networks_into_ovnkube_config(root: Path) -> None:
    write_ovn(root, "# tuned for the LTE uplink\ndisableOVSInit: false  # the default\n"
                    "mtu: 1300\n")
    env = {"MICROSHIFT_CLUSTER_CLUSTERCIDR": "10.128.0.0/14",
           "MICROSHIFT_CLUSTER_SERVICECIDR": "172.30.0.0/16", "MICROSHIFT_LOGVLEVEL": "Debug"}
    with network_namespace(br_ex=True) as netns:
        proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root, env=env,
                          netns=netns)
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    config = find(docs, "ConfigMap", "ovnkube-config")["data"]
    assert config["mtu"] == "1300"
    conf = config["ovnkube.conf"]
    for line in ('mtu="1300"', 'cluster-subnets="10.128.0.0/14"',
                 'service-cidrs="172.30.0.0/16"', 'apiserver="https://localhost:6443"',
                 'loglevel="4"', 'gateway-interface="br-ex"'):
        assert line in conf.splitlines()
    assert {"ovnkube-master", "ovnkube-node"} <= {d["metadata"]["name"] for d in docs
                                                  if d["kind"] == "DaemonSet"}
    static = plugin_static_documents(plugin_dir(root, "networking-ovnk"))
    assert docs[:len(static)] == static  # the kustomize resources first, in order


@pytest.mark.integration
def test_ovnk_without_ovn_yaml_uses_the_default_mtu(root: Path) -> None:
    (root / "etc/microshift/ovn.yaml").unlink()
    with network_namespace(br_ex=True) as netns:
        proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root, netns=netns)
    assert proc.returncode == 0, proc.stderr
    assert find(documents(proc.stdout), "ConfigMap", "ovnkube-config")["data"]["mtu"] == "1400"


@pytest.mark.integration
def test_ovnk_mtu_above_the_br_ex_mtu_exits_2(root: Path) -> None:
    write_ovn(root, "mtu: 9000\n")
    with network_namespace(br_ex=True, br_ex_mtu=1500) as netns:
        proc = run_plugin(plugin_dir(root, "networking-ovnk"), "run", sysroot=root, netns=netns)
    assert proc.returncode == 2
    assert "mtu: 9000 is larger than the MTU of br-ex (1500)" in proc.stderr


def test_shipped_ovn_yaml_holds_the_defaults(tree: Path) -> None:
    assert yaml.safe_load((tree / "etc/microshift/ovn.yaml").read_text()) == \
        {"disableOVSInit": False, "mtu": 1400}


# ---- TopoLVM ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("component", "config"), [("networking-ovnk", "ovn.yaml"),
                                                   ("storage-topolvm", "lvmd.yaml")])
def test_a_config_file_that_is_not_text_is_a_configuration_error(
        root: Path, component: str, config: str) -> None:
    (root / "etc/microshift" / config).write_bytes(b"\xff\xfe")
    proc = run_plugin(plugin_dir(root, component), "run", sysroot=root)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{config}: not UTF-8 text" in proc.stderr and "Traceback" not in proc.stderr


def write_lvmd(root: Path, text: str) -> None:
    (root / "etc/microshift/lvmd.yaml").write_text(text)


def test_topolvm_without_lvmd_yaml_exits_2(root: Path) -> None:
    (root / "etc/microshift/lvmd.yaml").unlink()
    proc = run_plugin(plugin_dir(root, "storage-topolvm"), "run", sysroot=root)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "lvmd.yaml does not exist" in proc.stderr


CLASS = "device-classes:\n  - name: default\n    volume-group: rhel\n"


@pytest.mark.parametrize(("text", "message"), [
    ("", "device-classes: must be a non-empty list"),
    ("socket-name: /run/lvmd/lvmd.socket\n", "device-classes: must be a non-empty list"),
    (CLASS + "    thin-pool: pool0\n",
     "device-classes[0].thin-pool: unknown field; allowed: name, volume-group"),
    ("device-classes:\n  - name: default\n", "device-classes[0].volume-group: is required"),
    (CLASS.replace("rhel", "-rhel"), "volume-group: '-rhel' is not allowed"),
    (CLASS.replace("default", "Fast_SSD"), "name: 'Fast_SSD' is not allowed"),
    (CLASS + "    spare-gb: -1\n", "spare-gb: -1 is not allowed"),
    (CLASS + "    default: maybe\n", "default: 'maybe' is not allowed; allowed: true or false"),
    (CLASS + "    default: true\n  - name: other\n    volume-group: data\n    default: true\n",
     "more than one class has default: true"),
    (CLASS + "  - name: default\n    volume-group: data\n", "name 'default' is used twice"),
    ("socket-name: lvmd.sock\n" + CLASS, "socket-name: 'lvmd.sock' is not allowed"),
    (CLASS + "  thin-pool:\n    name: pool0\n", "unexpected indentation"),
    ("devices: [sda]\n" + CLASS, "unsupported YAML"),
])
def test_topolvm_rejects_bad_lvmd_yaml_with_exit_2(root: Path, text: str, message: str) -> None:
    write_lvmd(root, text)
    proc = run_plugin(plugin_dir(root, "storage-topolvm"), "run", sysroot=root)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stdout == ""


@pytest.mark.integration
def test_topolvm_with_a_missing_volume_group_exits_1(root: Path) -> None:
    requires.need_root("`vgs` reads the block devices")
    requires.need_tools("vgs")
    write_lvmd(root, CLASS.replace("rhel", "msb-no-such-vg"))
    proc = run_plugin(plugin_dir(root, "storage-topolvm"), "run", sysroot=root)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "system precondition unmet: volume group 'msb-no-such-vg' (device-classes[0] in " \
        f"{root / 'etc/microshift/lvmd.yaml'}) does not exist; volume groups on this system: " \
        in proc.stderr


@pytest.mark.integration
def test_topolvm_with_a_real_volume_group_prints_lvmd_config_and_storage_classes(
        root: Path, tmp_path: Path) -> None:
    with volume_group(tmp_path) as vg:
        write_lvmd(root, "# the kickstart's layout\ndevice-classes:\n"
                         f"  - name: default\n    volume-group: {vg}\n    default: true\n"
                         "    spare-gb: 0\n"
                         f"  - name: fast\n    volume-group: '{vg}'\n    stripe: 2\n"
                         "    stripe-size: 64k\n")
        proc = run_plugin(plugin_dir(root, "storage-topolvm"), "run", sysroot=root)
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    lvmd = yaml.safe_load(find(docs, "ConfigMap", "lvmd")["data"]["lvmd.yaml"])
    assert lvmd == {"socket-name": "/run/lvmd/lvmd.socket", "device-classes": [
        {"name": "default", "volume-group": vg, "default": True, "spare-gb": 0},
        {"name": "fast", "volume-group": vg, "default": False, "spare-gb": 0, "stripe": 2,
         "stripe-size": "64k"}]}
    default = find(docs, "StorageClass", "topolvm-provisioner")
    assert default["metadata"]["annotations"][
        "storageclass.kubernetes.io/is-default-class"] == "true"
    assert default["provisioner"] == "topolvm.io"
    assert find(docs, "StorageClass", "topolvm-fast")["parameters"][
        "topolvm.io/device-class"] == "fast"
    for kind, name in (("CustomResourceDefinition", "logicalvolumes.topolvm.io"),
                       ("CSIDriver", "topolvm.io"), ("Deployment", "topolvm-controller"),
                       ("DaemonSet", "topolvm-node")):
        find(docs, kind, name)


def test_shipped_lvmd_yaml_is_the_kickstart_layout(tree: Path) -> None:
    assert yaml.safe_load((tree / "etc/microshift/lvmd.yaml").read_text()) == {
        "device-classes": [{"name": "default", "volume-group": "rhel", "default": True,
                            "spare-gb": 0}]}


# ---- Multus and the bridge -------------------------------------------------------------------

def test_multus_needs_a_networking_provider(tmp_path: Path) -> None:
    root = render_components(tmp_path / "root", ("core", "multus"))
    proc = run_plugin(plugin_dir(root, "multus"), "run", sysroot=root)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "install microshift-networking-ovnk or microshift-networking-bridge" in proc.stderr


def test_multus_prints_its_crd_daemonset_and_log_level(tree: Path) -> None:
    proc = run_plugin(plugin_dir(tree, "multus"), "run", sysroot=tree,
                      env={"MICROSHIFT_LOGVLEVEL": "Trace"})
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    crd = find(docs, "CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io")
    assert crd["spec"]["names"]["kind"] == "NetworkAttachmentDefinition"
    assert find(docs, "ConfigMap", "multus-daemon-config")["data"]["log-level"] == "debug"
    find(docs, "DaemonSet", "multus")


def test_multus_rejects_an_unknown_log_level(tree: Path) -> None:
    proc = run_plugin(plugin_dir(tree, "multus"), "run", sysroot=tree,
                      env={"MICROSHIFT_LOGVLEVEL": "Loud"})
    assert proc.returncode == 2 and "MICROSHIFT_LOGVLEVEL: 'Loud' is not allowed" in proc.stderr


@pytest.mark.parametrize(("cidr", "route"), [("10.42.0.0/16", "0.0.0.0/0"),
                                             ("fd01::/48", "::/0")])
def test_bridge_puts_the_cluster_network_into_the_cni_config(tree: Path, cidr: str,
                                                             route: str) -> None:
    proc = run_plugin(plugin_dir(tree, "networking-bridge"), "run", sysroot=tree,
                      env={"MICROSHIFT_CLUSTER_CLUSTERCIDR": cidr})
    assert proc.returncode == 0, proc.stderr
    data = find(documents(proc.stdout), "ConfigMap", "bridge-cni-config")["data"]
    conflist = yaml.safe_load(data["10-microshift-bridge.conflist"])  # JSON is YAML
    ipam = conflist["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": cidr}]] and ipam["routes"] == [{"dst": route}]


@pytest.mark.parametrize("cidr", ["", "10.42.0.0/33", "10.420.0.0/16", "cluster"])
def test_bridge_rejects_a_bad_cluster_network(tree: Path, cidr: str) -> None:
    proc = run_plugin(plugin_dir(tree, "networking-bridge"), "run", sysroot=tree,
                      env={"MICROSHIFT_CLUSTER_CLUSTERCIDR": cidr})
    assert proc.returncode == 2 and "MICROSHIFT_CLUSTER_CLUSTERCIDR" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("key", SHELL_PLUGINS)
def test_shell_plugin_with_a_broken_kustomization_exits_2(root: Path, key: str) -> None:
    directory = plugin_dir(root, key)
    (directory / "namespace.yaml").unlink()
    proc = run_plugin(directory, "run", sysroot=root)
    assert proc.returncode == 2 and "resources: namespace.yaml does not exist" in proc.stderr
