"""The loader (`python -m builder components run`): config.yaml, environment, plugins, output.

Unit tests drive small real plugin scripts in scratch roots; the integration tests run the
shipped plugins from the built RPMs inside network namespaces.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.cli import main
from builder.components.config import (
    MicroShiftConfig,
    load_config,
    node_ip,
    node_name,
    parse_config,
    plugin_environment,
)
from builder.components.loader import COMPONENTS_DIR, PluginError, run_components
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from tests.components.support import network_namespace, run_loader, volume_group
from tests.support.cli import PROJECT_ROOT

NODE = {"node": {"nodeIP": "192.0.2.10", "hostnameOverride": "edge-1"}}


# ---- config.yaml -----------------------------------------------------------------------------

def test_an_empty_config_means_microshifts_defaults() -> None:
    config = parse_config({}, "config.yaml")
    assert config == MicroShiftConfig()
    assert (str(config.cluster_network), str(config.service_network)) == \
        ("10.42.0.0/16", "10.43.0.0/16")
    assert config.node_port_range == (30000, 32767) and config.log_level == "Normal"


def test_the_shipped_core_config_yaml_is_all_defaults() -> None:
    shipped = PROJECT_ROOT / "specs/sources/microshift-core/etc/microshift/config.yaml"
    assert load_config(shipped) == MicroShiftConfig()


def test_a_missing_config_file_means_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "config.yaml") == MicroShiftConfig()


def test_every_field_is_read() -> None:
    config = parse_config({
        "dns": {"baseDomain": "edge.example.org"},
        "network": {"clusterNetwork": ["10.128.0.0/14"], "serviceNetwork": ["172.30.0.0/16"],
                    "serviceNodePortRange": "30000-30100"},
        "node": {"hostnameOverride": "edge-7", "nodeIP": "192.0.2.7"},
        "apiServer": {"advertiseAddress": "10.44.0.0",
                      "subjectAltNames": ["api.edge.example.org", "192.0.2.7"]},
        "debugging": {"logLevel": "TraceAll"},
        "etcd": {"memoryLimitMB": 256},
    }, "config.yaml")
    env = plugin_environment(config, node_ip=node_ip(config, Runner()),
                             node_name=node_name(config), sysroot=Path("/sysroot"))
    assert env == {
        "MICROSHIFT_CLUSTER_CLUSTERCIDR": "10.128.0.0/14",
        "MICROSHIFT_CLUSTER_SERVICECIDR": "172.30.0.0/16",
        "MICROSHIFT_CLUSTER_SERVICENODEPORTRANGE": "30000-30100",
        "MICROSHIFT_CLUSTER_URL": "https://localhost:6443",
        "MICROSHIFT_NODEIP": "192.0.2.7",
        "MICROSHIFT_SUBJECTALTNAMES": "api.edge.example.org,192.0.2.7",
        "MICROSHIFT_LOGVLEVEL": "TraceAll",
        "MICROSHIFT_NODENAME": "edge-7",
        "MICROSHIFT_BASEDOMAIN": "edge.example.org",
        "MICROSHIFT_SYSROOT": "/sysroot",
    }


BAD_CONFIGS: list[tuple[dict[str, Any], str]] = [
    ({"network": {"clusterCIDR": "10.42.0.0/16"}}, "network.clusterCIDR: unknown key"),
    ({"cluster": {}}, "cluster: unknown key; allowed keys here: apiServer, debugging, dns"),
    ({"network": {"clusterNetwork": ["10.42.0.0/33"]}},
     "network.clusterNetwork: '10.42.0.0/33' is not a valid network CIDR"),
    ({"network": {"clusterNetwork": ["10.42.0.1/16"]}}, "has host bits set"),
    ({"network": {"clusterNetwork": "10.42.0.0/16"}}, "network.clusterNetwork: expected a list"),
    ({"network": {"clusterNetwork": ["10.42.0.0/16", "fd01::/48"]}}, "exactly one CIDR"),
    ({"network": {"serviceNetwork": ["10.42.128.0/20"]}},
     "network.serviceNetwork: 10.42.128.0/20 overlaps clusterNetwork 10.42.0.0/16"),
    ({"network": {"serviceNetwork": ["fd02::/112"]}}, "allowed: the same address family"),
    ({"network": {"serviceNetwork": ["10.43.0.0/29"]}}, "is too small"),
    ({"network": {"serviceNodePortRange": "30000:32767"}},
     "network.serviceNodePortRange: '30000:32767' is malformed"),
    ({"network": {"serviceNodePortRange": "32767-30000"}}, "is malformed"),
    ({"network": {"serviceNodePortRange": "1-70000"}}, "is malformed"),
    ({"network": {"serviceNodePortRange": 30000}}, "expected a string"),
    ({"dns": {"baseDomain": "Example.COM"}}, "dns.baseDomain: 'Example.COM' is not allowed"),
    ({"node": {"nodeIP": "192.0.2.300"}}, "node.nodeIP: '192.0.2.300' is not allowed"),
    ({"node": {"hostnameOverride": "edge_1"}}, "node.hostnameOverride: 'edge_1'"),
    ({"apiServer": {"subjectAltNames": ["bad name"]}}, "apiServer.subjectAltNames"),
    ({"debugging": {"logLevel": "Verbose"}},
     "debugging.logLevel: 'Verbose' is not allowed; allowed: Normal, Debug, Trace, TraceAll"),
    ({"etcd": {"memoryLimitMB": 64}}, "etcd.memoryLimitMB: 64 is not allowed"),
    ({"dns": "example.com"}, "dns: expected a mapping"),
]


@pytest.mark.parametrize(("data", "message"), BAD_CONFIGS)
def test_bad_config_is_one_error_naming_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_config(data, "/etc/microshift/config.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("/etc/microshift/config.yaml: ")
    assert caught.value.exit_code == 2


# ---- node IP and node name -------------------------------------------------------------------

class FakeIpRunner(Runner):
    """Answers `ip -j ...` from canned JSON; records every command."""

    def __init__(self, answers: Mapping[str, object]) -> None:
        super().__init__()
        self.answers = answers
        self.calls: list[str] = []

    def run(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any
            ) -> subprocess.CompletedProcess[bytes]:
        command = " ".join(map(str, argv))
        self.calls.append(command)
        body = json.dumps(self.answers.get(command, [])).encode()
        return subprocess.CompletedProcess(list(map(str, argv)), 0, body, b"")


def test_node_ip_is_the_default_route_source_address() -> None:
    runner = FakeIpRunner({"ip -j -4 route show default":
                           [{"dst": "default", "gateway": "192.0.2.1", "dev": "br-ex",
                             "prefsrc": "192.0.2.10"}]})
    assert node_ip(MicroShiftConfig(), runner) == "192.0.2.10"


def test_node_ip_falls_back_to_the_route_devices_global_address() -> None:
    runner = FakeIpRunner({
        "ip -j -4 route show default": [{"dst": "default", "dev": "eth0"}],
        "ip -j -4 address show dev eth0": [{"addr_info": [
            {"family": "inet", "local": "127.0.0.5", "scope": "host"},
            {"family": "inet", "local": "198.51.100.4", "scope": "global"}]}],
    })
    assert node_ip(MicroShiftConfig(), runner) == "198.51.100.4"


def test_without_a_default_route_the_node_ip_must_be_configured() -> None:
    with pytest.raises(BuildError, match="no default route") as caught:
        node_ip(MicroShiftConfig(), FakeIpRunner({}))
    assert caught.value.hint == "set node.nodeIP in config.yaml"


def test_a_configured_node_ip_runs_no_command() -> None:
    runner = FakeIpRunner({})
    assert node_ip(MicroShiftConfig(node_ip="192.0.2.99"), runner) == "192.0.2.99"
    assert runner.calls == []


def test_node_name_defaults_to_the_lower_case_host_name() -> None:
    import socket

    assert node_name(MicroShiftConfig()) == socket.gethostname().lower()
    assert node_name(MicroShiftConfig(hostname_override="edge-9")) == "edge-9"


# ---- running plugins -------------------------------------------------------------------------

def configmap_plugin(name: str, *, data: str = "{}", exit_code: int = 0,
                     api_version: str = "v1", extra: str = "") -> str:
    """A real shell plugin that prints one ConfigMap (with `data`) and exits `exit_code`."""
    return f"""#!/bin/sh
case "$1" in
  api-version) echo {api_version}; exit 0 ;;
  run) ;;
  *) exit 2 ;;
esac
{extra}
echo "{name}: running" >&2
cat <<EOF
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: default
data: {data}
EOF
exit {exit_code}
"""


def make_root(tmp_path: Path, plugins: Mapping[str, str],
              config: Mapping[str, Any] | None = None) -> Path:
    root = tmp_path / "root"
    for name, script in plugins.items():
        directory = root / COMPONENTS_DIR / name
        directory.mkdir(parents=True)
        (directory / "plugin").write_text(script)
        (directory / "plugin").chmod(0o755)
    (root / "etc/microshift").mkdir(parents=True, exist_ok=True)
    (root / "etc/microshift/config.yaml").write_text(yaml.safe_dump(dict(config or NODE)))
    return root


def load(root: Path, *, timeout: float = 30) -> tuple[list[Any], str]:
    log = io.StringIO()
    outputs = run_components(root, config_path=None, runner=Runner(),
                             progress=Progress(stream=log), timeout=timeout)
    return outputs, log.getvalue()


def test_plugins_run_in_alphabetical_order_in_their_directory_with_the_environment(
        tmp_path: Path) -> None:
    seen = '{"cwd": "$(pwd)", "cidr": "$MICROSHIFT_CLUSTER_CLUSTERCIDR", ' \
           '"ports": "$MICROSHIFT_CLUSTER_SERVICENODEPORTRANGE", "ip": "$MICROSHIFT_NODEIP", ' \
           '"node": "$MICROSHIFT_NODENAME", "sysroot": "$MICROSHIFT_SYSROOT"}'
    root = make_root(tmp_path, {name: configmap_plugin(name, data=seen)
                                for name in ("010-b", "004-a", "005-c", "100-d")},
                     {**NODE, "network": {"clusterNetwork": ["10.128.0.0/14"]}})
    outputs, log = load(root)
    assert [o.plugin for o in outputs] == ["004-a", "005-c", "010-b", "100-d"]
    data = outputs[0].documents[0]["data"]
    assert data == {"cwd": str(root / COMPONENTS_DIR / "004-a"), "cidr": "10.128.0.0/14",
                    "ports": "30000-32767", "ip": "192.0.2.10", "node": "edge-1",
                    "sysroot": str(root)}
    assert "[005-c] running" in log  # stderr is relayed, the plugin named once


def test_hidden_entries_and_stray_files_are_not_plugins(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a"), ".005-b": "junk"})
    (root / COMPONENTS_DIR / "README").write_text("not a plugin")
    outputs, _ = load(root)
    assert [o.plugin for o in outputs] == ["004-a"]


@pytest.mark.parametrize(("code", "meaning", "loader_code"), [
    (1, "a system precondition is unmet", 1),
    (2, "its configuration is wrong", 2),
    (3, "unexpected exit code 3 (the convention allows 0, 1 and 2)", 1),
])
def test_a_failing_plugin_stops_the_run_with_its_name_meaning_and_stderr(
        tmp_path: Path, code: int, meaning: str, loader_code: int) -> None:
    root = make_root(tmp_path, {
        "004-a": configmap_plugin("a"),
        "005-b": configmap_plugin("b", exit_code=code, extra="echo 'br-ex is missing' >&2"),
        "010-c": configmap_plugin("c", extra="touch ran-c"),
    })
    with pytest.raises(PluginError) as caught:
        load(root)
    message = str(caught.value)
    assert f"plugin 005-b failed with exit code {code}: {meaning}" in message
    assert "br-ex is missing" in message
    assert caught.value.exit_code == loader_code
    assert not (root / COMPONENTS_DIR / "010-c/ran-c").exists()


def test_a_plugin_that_hangs_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a", extra="sleep 30")})
    # 2 s, not less: the same timeout covers the plugin's `api-version` answer, which a
    # loaded machine may take a while to start.
    with pytest.raises(PluginError, match=r"004-a `run` did not finish within 2s"):
        load(root, timeout=2)


def test_an_unsupported_api_version_stops_before_any_plugin_runs(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a", extra="touch ran-a"),
                                "005-b": configmap_plugin("b", api_version="v2")})
    with pytest.raises(PluginError, match="005-b speaks calling convention 'v2'; this loader "
                                          "supports v1"):
        load(root)
    assert not (root / COMPONENTS_DIR / "004-a/ran-a").exists()


@pytest.mark.parametrize(("setup", "message"), [
    (lambda p: p.chmod(0o644), "is not executable"),
    (lambda p: p.unlink(), "004-a/plugin is missing"),
    (lambda p: p.write_text("#!/nonexistent/interpreter\n") or p.chmod(0o755),
     "cannot execute"),
])
def test_a_plugin_that_cannot_run_is_named(tmp_path: Path, setup: Callable[[Path], object],
                                           message: str) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a")})
    setup(root / COMPONENTS_DIR / "004-a/plugin")
    with pytest.raises(PluginError, match=message):
        load(root)


@pytest.mark.parametrize(("stdout", "message"), [
    ("key: [unclosed", "printed invalid YAML"),
    ("- just\n- a list", "document 1 that is not a Kubernetes object"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}", "not a Kubernetes object"),
])
def test_output_that_is_not_kubernetes_objects_is_rejected(tmp_path: Path, stdout: str,
                                                           message: str) -> None:
    script = f"#!/bin/sh\n[ \"$1\" = api-version ] && echo v1 && exit 0\ncat <<'EOF'\n" \
             f"{stdout}\nEOF\n"
    root = make_root(tmp_path, {"004-a": script})
    with pytest.raises(PluginError, match=message):
        load(root)


def test_two_plugins_printing_the_same_object_is_an_error(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("shared"),
                                "005-b": configmap_plugin("shared")})
    with pytest.raises(PluginError, match=r"ConfigMap default/shared .* printed by both 004-a "
                                          r"and 005-b"):
        load(root)


def test_a_core_only_root_gives_an_empty_stream(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {})
    (root / COMPONENTS_DIR).mkdir(parents=True)  # owned by microshift-core, empty
    assert main(["components", "run", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no component plugins" in err


def test_a_root_that_is_not_a_microshift_image_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {})
    assert main(["components", "run", "--root", str(root)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "not a MicroShift image root" in err


# ---- the command -----------------------------------------------------------------------------

def test_cli_prints_one_parseable_stream_labelled_by_plugin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a", data='{"script": "a\\nb\\n"}'),
                                "005-b": configmap_plugin("b")})
    assert main(["components", "run", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    docs = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in docs] == ["a", "b"]
    assert docs[0]["data"]["script"] == "a\nb\n"
    assert "# Source: 004-a" in out and "script: |" in out


@pytest.mark.parametrize("config", [
    {"network": {"serviceNetwork": ["10.42.0.0/16"]}},
    {"network": {"serviceNodePortRange": "30000"}},
    {"bogus": 1},
])
def test_cli_bad_config_exits_2_with_one_line_and_no_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any]) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a", extra="touch ran")}, config)
    assert main(["components", "run", "--root", str(root)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    [error] = [line for line in err.splitlines() if line.startswith("error:")]
    assert f"{root}/etc/microshift/config.yaml: network." in error or "bogus" in error
    assert not (root / COMPONENTS_DIR / "004-a/ran").exists()


def test_cli_config_option_overrides_the_roots_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin(
        "a", data='{"cidr": "$MICROSHIFT_CLUSTER_SERVICECIDR"}')})
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**NODE, "network": {"serviceNetwork": ["10.96.0.0/12"]}}))
    assert main(["components", "run", "--root", str(root), "--config", str(other)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["data"] == {"cidr": "10.96.0.0/12"}
    assert main(["components", "run", "--root", str(root), "--config",
                 str(tmp_path / "missing.yaml")]) == 2


def test_cli_plugin_failure_exits_with_its_code_and_leaves_out_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a", exit_code=2)})
    out = tmp_path / "manifests.yaml"
    out.write_text("previous\n")
    assert main(["components", "run", "--root", str(root), "--out", str(out)]) == 2
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifests.yaml", "root"]
    assert "plugin 004-a failed with exit code 2: its configuration is wrong" in \
        capsys.readouterr().err


def test_cli_out_yaml_file_and_kustomize_directory(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a"),
                                "005-b": configmap_plugin("b")})
    stream = tmp_path / "out/manifests.yaml"
    assert main(["components", "run", "--root", str(root), "--out", str(stream)]) == 0
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(stream.read_text())] == ["a", "b"]
    directory = tmp_path / "kustomize"
    for _ in range(2):  # the second run replaces the directory as a whole
        assert main(["components", "run", "--root", str(root), "--out", str(directory)]) == 0
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["004-a.yaml", "005-b.yaml"]
    assert yaml.safe_load((directory / "005-b.yaml").read_text())["metadata"]["name"] == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kustomize", "out", "root"]


def test_cli_never_replaces_a_directory_it_did_not_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path, {"004-a": configmap_plugin("a")})
    precious = tmp_path / "work"
    precious.mkdir()
    (precious / "important.txt").write_text("keep\n")
    assert main(["components", "run", "--root", str(root), "--out", str(precious)]) == 1
    assert "not empty and was not written by `components run`" in capsys.readouterr().err
    assert [p.name for p in precious.iterdir()] == ["important.txt"]


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_cli_rejects_a_bad_timeout(tmp_path: Path, value: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["components", "run", "--root", str(tmp_path), "--timeout", value])
    assert caught.value.code == 2 and "--timeout" in capsys.readouterr().err


# ---- acceptance: the built RPMs of core + ovnk + topolvm + multus ---------------------------

ACCEPTANCE_RPMS = ("core", "networking-ovnk", "storage-topolvm", "multus")


@pytest.fixture
def image_root(built_release: Path, tmp_path: Path) -> Path:
    """The four packages' payloads, extracted from the RPMs into one scratch root."""
    root = tmp_path / "image"
    root.mkdir()
    for key in ACCEPTANCE_RPMS:
        [rpm] = (built_release / "rpms").glob(f"microshift-{key}-[0-9]*.rpm")
        cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True).stdout
        subprocess.run(["cpio", "-idm", "--quiet"], input=cpio, cwd=root, check=True)
    (root / "etc/microshift/config.yaml").write_text(yaml.safe_dump({
        "network": {"clusterNetwork": ["10.128.0.0/14"], "serviceNetwork": ["172.30.0.0/16"],
                    "serviceNodePortRange": "30000-31000"},
        "debugging": {"logLevel": "Debug"}}))
    (root / "etc/microshift/ovn.yaml").write_text("disableOVSInit: false\nmtu: 1300\n")
    return root


@pytest.mark.integration
def test_acceptance_built_rpms_in_a_namespace_with_br_ex(image_root: Path,
                                                         tmp_path: Path) -> None:
    assert sorted(p.name for p in (image_root / COMPONENTS_DIR).iterdir()) == \
        ["004-multus", "005-networking-ovnk", "010-storage-topolvm"]
    with volume_group(tmp_path) as vg, network_namespace(br_ex=True) as netns:
        (image_root / "etc/microshift/lvmd.yaml").write_text(
            f"device-classes:\n  - name: default\n    volume-group: {vg}\n    default: true\n")
        proc = run_loader("--root", image_root, netns=netns)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("DaemonSet", "ovnkube-master"), ("DaemonSet", "ovnkube-node"),
            ("Deployment", "topolvm-controller"), ("DaemonSet", "topolvm-node"),
            ("CustomResourceDefinition", "logicalvolumes.topolvm.io"),
            ("StorageClass", "topolvm-provisioner"), ("DaemonSet", "multus"),
            ("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io"),
            } <= names
    [ovnkube] = [d for d in docs if d["metadata"]["name"] == "ovnkube-config"]
    conf = ovnkube["data"]["ovnkube.conf"].splitlines()
    assert 'mtu="1300"' in conf and 'cluster-subnets="10.128.0.0/14"' in conf
    assert 'service-cidrs="172.30.0.0/16"' in conf and 'loglevel="4"' in conf
    [lvmd] = [d for d in docs if d["metadata"]["name"] == "lvmd"]
    assert f'volume-group: "{vg}"' in lvmd["data"]["lvmd.yaml"]


@pytest.mark.integration
def test_acceptance_without_br_ex_the_ovnk_plugin_exits_1_and_the_loader_says_so(
        image_root: Path) -> None:
    with network_namespace(br_ex=False) as netns:
        proc = run_loader("--root", image_root, netns=netns)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "plugin 005-networking-ovnk failed with exit code 1: a system precondition is " \
           "unmet" in proc.stderr
    assert "br-ex does not exist" in proc.stderr


@pytest.mark.integration
def test_acceptance_mtu_out_of_range_exits_2_naming_field_and_range(image_root: Path) -> None:
    (image_root / "etc/microshift/ovn.yaml").write_text("mtu: 99999\n")
    with network_namespace(br_ex=True) as netns:
        proc = run_loader("--root", image_root, netns=netns)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "plugin 005-networking-ovnk failed with exit code 2: its configuration is wrong" \
        in proc.stderr
    assert "mtu: 99999 is out of range; allowed: an integer from 1280 to 65535" in proc.stderr
