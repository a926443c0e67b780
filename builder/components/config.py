"""MicroShift's /etc/microshift/config.yaml, read strictly, and the plugins' environment.

The field names follow MicroShift 4.14's pkg/config (dns.baseDomain, network.clusterNetwork,
network.serviceNetwork, network.serviceNodePortRange, node.hostnameOverride, node.nodeIP,
apiServer.advertiseAddress, apiServer.subjectAltNames, debugging.logLevel,
etcd.memoryLimitMB, manifests.kustomizePaths). The environment is the one of seed 003's
plugin calling convention, plus MICROSHIFT_SYSROOT, this project's extension that lets a
plugin read its configuration files from an extracted image tree instead of "/".

Devices run this module too (microshift-components,
builder.components.microshift_components) with the system's Python 3.9 on RHEL 9: no syntax
or run-time feature newer than 3.9 here.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.core.schema import Fields, load_yaml

CONFIG_PATH = Path("etc/microshift/config.yaml")
LOG_LEVELS = ("Normal", "Debug", "Trace", "TraceAll")
# MicroShift's API server always listens on this URL; config.yaml has no field for it.
CLUSTER_URL = "https://localhost:6443"
# RFC 1123 subdomain: what Kubernetes accepts as a node name, and a DNS domain.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

if TYPE_CHECKING:  # an annotation only: `X | Y` at run time needs Python 3.10
    Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# MicroShift 4.14's default manifests.kustomizePaths (pkg/config/manifests.go).
DEFAULT_KUSTOMIZE_PATHS = ("/usr/lib/microshift/manifests", "/usr/lib/microshift/manifests.d/*",
                           "/etc/microshift/manifests", "/etc/microshift/manifests.d/*")


@dataclass(frozen=True)
class MicroShiftConfig:
    """The settings of config.yaml that the plugins receive; defaults are MicroShift's."""

    base_domain: str = "example.com"
    cluster_network: Network = field(default=ipaddress.ip_network("10.42.0.0/16"))
    service_network: Network = field(default=ipaddress.ip_network("10.43.0.0/16"))
    node_port_range: tuple[int, int] = (30000, 32767)
    hostname_override: str = ""
    node_ip: str = ""
    advertise_address: str = ""
    subject_alt_names: tuple[str, ...] = ()
    log_level: str = "Normal"
    etcd_memory_limit_mb: int = 0
    # None: the file does not set manifests.kustomizePaths, MicroShift's defaults apply.
    kustomize_paths: tuple[str, ...] | None = None

    @property
    def effective_kustomize_paths(self) -> tuple[str, ...]:
        return DEFAULT_KUSTOMIZE_PATHS if self.kustomize_paths is None \
            else self.kustomize_paths


def load_config(path: Path) -> MicroShiftConfig:
    """Read config.yaml; a missing file means every default, as in MicroShift."""
    if not path.exists():
        return MicroShiftConfig()
    data = load_yaml(path)
    return parse_config({} if data is None else data, str(path))


def parse_config(data: object, file: str) -> MicroShiftConfig:
    """Validate the whole document; the first problem is one InputError naming the field."""
    top = Fields(file, "", data)
    dns, network, node, api, debugging, etcd, manifests = (
        _section(top, key) for key in ("dns", "network", "node", "apiServer", "debugging",
                                       "etcd", "manifests"))
    top.close()
    domain = dns.get("baseDomain", str, "example.com")
    dns.check("baseDomain", domain, _is_dns_subdomain, "a lower-case DNS domain")
    dns.close()
    cluster = _one_network(network, "clusterNetwork", "10.42.0.0/16")
    service = _one_network(network, "serviceNetwork", "10.43.0.0/16")
    _check_networks(network, cluster, service)
    ports = _port_range(network)
    network.close()
    hostname = node.get("hostnameOverride", str, "")
    node.check("hostnameOverride", hostname, lambda h: not h or _is_dns_subdomain(h),
               "empty, or a lower-case RFC 1123 host name")
    node_ip = node.get("nodeIP", str, "")
    node.check("nodeIP", node_ip, lambda a: not a or _is_ip(a), "empty, or an IP address")
    node.close()
    advertise = api.get("advertiseAddress", str, "")
    api.check("advertiseAddress", advertise, lambda a: not a or _is_ip(a),
              "empty, or an IP address")
    sans = _subject_alt_names(api)
    api.close()
    level = debugging.get("logLevel", str, "Normal")
    debugging.check("logLevel", level, LOG_LEVELS.__contains__, ", ".join(LOG_LEVELS))
    debugging.close()
    memory = etcd.get("memoryLimitMB", int, 0)
    etcd.check("memoryLimitMB", memory, lambda m: m == 0 or m >= 128,
               "0 (no limit) or at least 128")
    etcd.close()
    paths = _kustomize_paths(manifests)
    manifests.close()
    return MicroShiftConfig(
        base_domain=domain, cluster_network=cluster, service_network=service,
        node_port_range=ports, hostname_override=hostname, node_ip=node_ip,
        advertise_address=advertise, subject_alt_names=sans, log_level=level,
        etcd_memory_limit_mb=memory, kustomize_paths=paths)


def _kustomize_paths(fields: Fields) -> tuple[str, ...] | None:
    """manifests.kustomizePaths: absolute paths or glob patterns; [] disables manifests."""
    if not fields.has("kustomizePaths") or fields.data["kustomizePaths"] is None:
        fields.get("kustomizePaths", list)
        return None
    paths = fields.get("kustomizePaths", list)
    for path in paths:
        fields.check("kustomizePaths", path, lambda p: isinstance(p, str) and
                     p.startswith("/"), "absolute paths or glob patterns, e.g. "
                     "/etc/microshift/manifests.d/*")
    return tuple(paths)


def _section(top: Fields, key: str) -> Fields:
    return top.child(key) or Fields(top.file, key, {})


def _one_network(fields: Fields, key: str, default: str) -> Network:
    cidrs = fields.get(key, list, [default])
    if len(cidrs) != 1:
        raise fields.error(key, f"has {len(cidrs)} entries; allowed: exactly one CIDR "
                                "(dual-stack is not supported by this release)")
    cidr = cidrs[0]
    if not isinstance(cidr, str):
        raise fields.error(key, f"{cidr!r} is not allowed; allowed: a CIDR such as {default}")
    try:
        return ipaddress.ip_network(cidr)
    except ValueError as exc:
        raise fields.error(key, f"{cidr!r} is not a valid network CIDR ({exc}); "
                                f"allowed: a CIDR such as {default}") from None


def _check_networks(fields: Fields, cluster: Network, service: Network) -> None:
    if cluster.version != service.version:
        raise fields.error("serviceNetwork", f"{service} is IPv{service.version} but "
                           f"clusterNetwork {cluster} is IPv{cluster.version}; "
                           "allowed: the same address family")
    if cluster.overlaps(service):
        raise fields.error("serviceNetwork", f"{service} overlaps clusterNetwork {cluster}; "
                                             "allowed: disjoint networks")
    # The cluster DNS service gets the 10th address of the service network.
    if service.num_addresses < 16:
        raise fields.error("serviceNetwork", f"{service} is too small; allowed: a network "
                                             "of at least 16 addresses (prefix /28 or shorter)")


def _port_range(fields: Fields) -> tuple[int, int]:
    text = fields.get("serviceNodePortRange", str, "30000-32767")
    match = re.fullmatch(r"([0-9]{1,5})-([0-9]{1,5})", text)
    first, last = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or not 1 <= first <= last <= 65535:
        raise fields.error("serviceNodePortRange", f"{text!r} is malformed; allowed: "
                           "FIRST-LAST with 1 <= FIRST <= LAST <= 65535, e.g. 30000-32767")
    return first, last


def _subject_alt_names(fields: Fields) -> tuple[str, ...]:
    names = fields.get("subjectAltNames", list, [])
    for name in names:
        if not isinstance(name, str) or not (_is_ip(name) or _is_dns_subdomain(name.lower())):
            raise fields.error("subjectAltNames", f"{name!r} is not allowed; allowed: "
                                                  "DNS names and IP addresses")
    return tuple(names)


def _is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and DNS_SUBDOMAIN.match(name) is not None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def plugin_environment(config: MicroShiftConfig, *, node_ip: str, node_name: str,
                       sysroot: Path) -> dict[str, str]:
    """The MICROSHIFT_* variables of the calling convention for this configuration."""
    first, last = config.node_port_range
    return {
        "MICROSHIFT_CLUSTER_CLUSTERCIDR": str(config.cluster_network),
        "MICROSHIFT_CLUSTER_SERVICECIDR": str(config.service_network),
        "MICROSHIFT_CLUSTER_SERVICENODEPORTRANGE": f"{first}-{last}",
        "MICROSHIFT_CLUSTER_URL": CLUSTER_URL,
        "MICROSHIFT_NODEIP": node_ip,
        "MICROSHIFT_SUBJECTALTNAMES": ",".join(config.subject_alt_names),
        "MICROSHIFT_LOGVLEVEL": config.log_level,
        "MICROSHIFT_NODENAME": node_name,
        "MICROSHIFT_BASEDOMAIN": config.base_domain,
        "MICROSHIFT_SYSROOT": str(sysroot),
    }


def node_name(config: MicroShiftConfig) -> str:
    """node.hostnameOverride, else this host's name (lower-cased, as the kubelet does)."""
    if config.hostname_override:
        return config.hostname_override
    name = socket.gethostname().lower()
    if not _is_dns_subdomain(name):
        raise BuildError(f"this host's name {name!r} is not a valid Kubernetes node name",
                         hint="set node.hostnameOverride in config.yaml")
    return name


def node_ip(config: MicroShiftConfig, runner: Runner) -> str:
    """node.nodeIP, else the address of the interface that holds the default route."""
    if config.node_ip:
        return config.node_ip
    for family in ("-4", "-6"):
        routes = json.loads(runner.output(["ip", "-j", family, "route", "show", "default"])
                            or "[]")
        for route in routes:
            if route.get("prefsrc"):
                return str(route["prefsrc"])
            if route.get("dev"):
                address = _interface_address(runner, family, str(route["dev"]))
                if address:
                    return address
    raise BuildError("cannot find the node IP: this system has no default route with an "
                     "address", hint="set node.nodeIP in config.yaml")


def _interface_address(runner: Runner, family: str, device: str) -> str | None:
    links = json.loads(runner.output(["ip", "-j", family, "address", "show", "dev", device])
                       or "[]")
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("scope") == "global" and info.get("local"):
                return str(info["local"])
    return None
