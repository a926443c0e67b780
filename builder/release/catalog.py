"""The components this project packages, and the slots that make pairs incompatible."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    key: str                 # name in release.yaml
    package: str             # RPM name
    summary: str
    slot: str | None = None  # components sharing a slot conflict with each other
    plugin: str | None = None  # directory under /usr/lib/microshift/components.d/
    services: tuple[str, ...] = ()

    @property
    def spec_template(self) -> str:
        return f"{self.package}.spec.j2"

    @property
    def slot_capability(self) -> str | None:
        return f"microshift-{self.slot}-provider" if self.slot else None


COMPONENTS: tuple[Component, ...] = (
    Component("core", "microshift-core", "MicroShift core: the all-in-one binary and service",
              services=("microshift.service", "microshift-components.service")),
    Component("networking-ovnk", "microshift-networking-ovnk",
              "OVN-Kubernetes networking for MicroShift", slot="networking",
              plugin="005-networking-ovnk",
              services=("microshift-ovs-init.service", "openvswitch.service")),
    Component("networking-bridge", "microshift-networking-bridge",
              "Minimal bridge CNI networking for MicroShift", slot="networking",
              plugin="005-networking-bridge"),
    Component("storage-topolvm", "microshift-storage-topolvm",
              "TopoLVM persistent volumes for MicroShift", slot="storage",
              plugin="010-storage-topolvm"),
    Component("multus", "microshift-multus", "Multus secondary networks for MicroShift",
              plugin="004-multus"),
    Component("greenboot", "microshift-greenboot",
              "Greenboot health checks and data rollback for MicroShift",
              services=("microshift-data-restore.service",)),
    Component("update", "microshift-update",
              "Over-the-air updates: signed static delta files over slow, metered links",
              services=("microshift-update.timer",)),
    # Required by microshift-core: RHEL for Edge devices run SELinux enforcing.
    Component("selinux", "microshift-selinux", "SELinux policy module for MicroShift"),
    Component("release-info", "microshift-release-info",
              "Release information for MicroShift: every release image by digest"),
)

BY_KEY = {c.key: c for c in COMPONENTS}
BY_PACKAGE = {c.package: c for c in COMPONENTS}


def component(key: str) -> Component:
    return BY_KEY[key]
