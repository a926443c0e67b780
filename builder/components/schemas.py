"""The models of the device's configuration files: /etc/microshift/config.yaml, ovn.yaml and
lvmd.yaml.

These files are read on the device by code that cannot use pydantic (the components loader
runs with RHEL 9's Python 3.9, the plugins with the standard library only): the models here
are the declarative definition, `schemas/*.schema.json` are generated from them for editors
and other tools, and the tests check that the device-side readers accept and refuse what the
models do (tests/components/test_schemas.py). The builder validates the files it writes into
an image (blueprint file customizations) against them.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from builder.core.models import Model, refuse

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
VG_NAME = r"^[A-Za-z0-9+_.][A-Za-z0-9+_.-]{0,126}$"
STRIPE_SIZE = r"^[1-9][0-9]*[kKmMgG]?$"
PORT_RANGE = r"^[0-9]{1,5}-[0-9]{1,5}$"
IP_SCHEMA = {"anyOf": [{"const": ""}, {"type": "string", "format": "ipv4"},
                       {"type": "string", "format": "ipv6"}]}


def _ip(value: str) -> str:
    if value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise refuse(f"{value!r} is not allowed; allowed: empty, or an IP address") from None
    return value


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value)
    except ValueError as exc:
        raise refuse(f"{value!r} is not a valid network CIDR ({exc}); allowed: a CIDR such "
                     "as 10.42.0.0/16") from None
    return value


def _subdomain_or_empty(value: str) -> str:
    if value and (len(value) > 253 or not re.match(DNS_SUBDOMAIN, value)):
        raise refuse(f"{value!r} is not allowed; allowed: empty, or a lower-case RFC 1123 "
                     "host name")
    return value


def _port_range(value: str) -> str:
    first, _, last = value.partition("-")
    if not 1 <= int(first) <= int(last) <= 65535:
        raise refuse(f"{value!r} is malformed; allowed: FIRST-LAST with 1 <= FIRST <= LAST "
                     "<= 65535, e.g. 30000-32767")
    return value


def _san(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if len(value) > 253 or not re.match(DNS_SUBDOMAIN, value.lower()):
            raise refuse(f"{value!r} is not allowed; allowed: DNS names and IP "
                         "addresses") from None
    return value


IP = Annotated[str, AfterValidator(_ip), WithJsonSchema(IP_SCHEMA)]
CIDR = Annotated[str, AfterValidator(_cidr), Field(description="a CIDR such as 10.42.0.0/16")]
Networks = Annotated[list[CIDR], Field(min_length=1, max_length=1, description=(
    "exactly one CIDR (dual-stack is not supported by this release)"))]


class Dns(Model):
    baseDomain: str = Field("example.com", max_length=253, pattern=DNS_SUBDOMAIN,
                            description="a lower-case DNS domain")


class Network(Model):
    clusterNetwork: Networks = Field(default_factory=lambda: ["10.42.0.0/16"])
    serviceNetwork: Networks = Field(default_factory=lambda: ["10.43.0.0/16"])
    serviceNodePortRange: Annotated[str, AfterValidator(_port_range)] = Field(
        "30000-32767", pattern=PORT_RANGE, description=(
            "FIRST-LAST with 1 <= FIRST <= LAST <= 65535, e.g. 30000-32767"))

    @model_validator(mode="after")
    def _disjoint(self) -> Network:
        cluster = ipaddress.ip_network(self.clusterNetwork[0])
        service = ipaddress.ip_network(self.serviceNetwork[0])
        if cluster.version != service.version:
            raise refuse(f"{service} is IPv{service.version} but clusterNetwork {cluster} is "
                         f"IPv{cluster.version}; allowed: the same address family",
                         at="serviceNetwork")
        if cluster.overlaps(service):  # the same family: checked above
            raise refuse(f"{service} overlaps clusterNetwork {cluster}; allowed: disjoint "
                         "networks", at="serviceNetwork")
        if service.num_addresses < 16:  # the cluster DNS service is its 10th address
            raise refuse(f"{service} is too small; allowed: a network of at least 16 "
                         "addresses (prefix /28 or shorter)", at="serviceNetwork")
        return self


class Node(Model):
    hostnameOverride: Annotated[str, AfterValidator(_subdomain_or_empty)] = Field(
        "", description="empty, or a lower-case RFC 1123 host name")
    nodeIP: IP = ""


class ApiServer(Model):
    advertiseAddress: IP = ""
    subjectAltNames: list[Annotated[str, AfterValidator(_san)]] = Field(
        default_factory=list, description="DNS names and IP addresses")


class Debugging(Model):
    logLevel: Literal["Normal", "Debug", "Trace", "TraceAll"] = "Normal"


def _memory(value: int) -> int:
    if value != 0 and value < 128:
        raise refuse(f"{value!r} is not allowed; allowed: 0 (no limit) or at least 128")
    return value


class Etcd(Model):
    memoryLimitMB: Annotated[int, AfterValidator(_memory), WithJsonSchema(
        {"anyOf": [{"const": 0}, {"type": "integer", "minimum": 128}],
         "description": "0 (no limit) or at least 128"})] = 0


class Manifests(Model):
    kustomizePaths: list[Annotated[str, Field(pattern=r"^/", description=(
        "absolute paths or glob patterns, e.g. /etc/microshift/manifests.d/*"))]] | None = None


class MicroShiftConfigDocument(Model):
    """/etc/microshift/config.yaml (the subset of MicroShift 4.14's pkg/config the image
    sets and the component plugins receive)."""

    model_config = {"title": "MicroShift configuration (/etc/microshift/config.yaml)"}

    dns: Dns | None = None
    network: Network | None = None
    node: Node | None = None
    apiServer: ApiServer | None = None
    debugging: Debugging | None = None
    etcd: Etcd | None = None
    manifests: Manifests | None = None


class OvnDocument(Model):
    """/etc/microshift/ovn.yaml, read by the 005-networking-ovnk plugin."""

    model_config = {"title": "MicroShift OVN-Kubernetes configuration (ovn.yaml)"}

    disableOVSInit: bool = False
    mtu: int = Field(1400, ge=1280, le=65535, description="an integer from 1280 to 65535")


class DeviceClass(Model):
    name: str = Field(pattern=DNS_LABEL, description="a lower-case DNS label (a-z, 0-9, -)")
    volume_group: str = Field(alias="volume-group", pattern=VG_NAME, description=(
        "an LVM volume group name (A-Z a-z 0-9 + _ . -)"))
    default: bool = False
    spare_gb: int = Field(0, alias="spare-gb", ge=0, description="a non-negative integer")
    stripe: int | None = Field(None, ge=1, description="a positive integer")
    stripe_size: Annotated[str | int, WithJsonSchema({
        "anyOf": [{"type": "string", "pattern": STRIPE_SIZE},
                  {"type": "integer", "minimum": 1}],
        "description": "a size such as 64k or 1m"})] | None = Field(None, alias="stripe-size")

    @model_validator(mode="after")
    def _size(self) -> DeviceClass:
        size = self.stripe_size
        if size is not None and (isinstance(size, bool) or not re.match(STRIPE_SIZE, str(size))):
            raise refuse(f"{size!r} is not allowed; allowed: a size such as 64k or 1m",
                         at="stripe-size")
        return self


class LvmdDocument(Model):
    """/etc/microshift/lvmd.yaml, read by the 010-storage-topolvm plugin."""

    model_config = {"title": "MicroShift TopoLVM configuration (lvmd.yaml)",
                    "populate_by_name": False}

    socket_name: str = Field("/run/lvmd/lvmd.socket", alias="socket-name", pattern=r"^/",
                             description="an absolute path")
    device_classes: list[DeviceClass] = Field(alias="device-classes", min_length=1,
                                              description="a non-empty list of device classes")

    @model_validator(mode="after")
    def _unique(self) -> LvmdDocument:
        names = [c.name for c in self.device_classes]
        for name in names:
            if names.count(name) > 1:
                raise refuse(f"name {name!r} is used twice; allowed: unique names",
                             at="device-classes")
        if sum(c.default for c in self.device_classes) > 1:
            raise refuse("more than one class has default: true; allowed: at most one",
                         at="device-classes")
        return self


DOCUMENTS: dict[str, type[Model]] = {
    "config": MicroShiftConfigDocument, "ovn": OvnDocument, "lvmd": LvmdDocument}


def check(kind: str, data: Any, file: str) -> Model:
    """Validate one parsed configuration file with its model (an InputError when wrong)."""
    from builder.core.models import validate
    return validate(DOCUMENTS[kind], data, file)
