"""A throttled link between two network namespaces: the update server and the device.

Two namespaces joined by a veth pair, with a `tbf` qdisc on the server side's egress (the
download direction) limiting the rate, e.g. 5 Mbit/s for LTE. `netem` is not available on the
build machines, so link latency is modelled on the serving side (RepoServer's per-request
delay). Addresses come from TEST-NET-1 (192.0.2.0/30) and exist only inside the two
namespaces, so no traffic can leave them. Everything is removed on exit.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from builder.core.errors import BuildError
from builder.core.runner import Runner, find_tool

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
SERVER_ADDR = "192.0.2.1"
DEVICE_ADDR = "192.0.2.2"


def netns_unavailable_reason(runner: Runner) -> str | None:
    """Why a throttled link cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root or in a privileged container)"
    for tool in ("ip", "tc"):
        if find_tool(tool) is None:
            return f"'{tool}' (iproute2) is not installed"
    probe = f"msb-probe-{os.getpid()}"
    proc = runner.run(["ip", "netns", "add", probe], check=False)
    if proc.returncode != 0:
        return f"cannot create a network namespace: {proc.stderr.decode().strip()}"
    runner.run(["ip", "netns", "del", probe], check=False)
    return None


def in_netns(name: str, func: Callable[[], T]) -> T:
    """Call func in a short-lived thread that has joined network namespace `name`.

    Sockets belong to the namespace they were created in, so a server socket made here
    listens inside the namespace while any thread of this process serves it.
    """
    box: dict[str, T] = {}
    errors: list[BaseException] = []

    def target() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f"/run/netns/{name}", "rb") as handle:
                if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {name}: {os.strerror(err)}")
            box["value"] = func()
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"netns:{name}")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box["value"]


class ThrottledLink:
    """`with ThrottledLink(runner, rate_kbit=5000) as link:` server and device namespaces."""

    def __init__(self, runner: Runner, rate_kbit: int, tag: str | None = None) -> None:
        if rate_kbit <= 0:
            raise BuildError(f"link rate must be positive, got {rate_kbit} kbit/s")
        self.runner = runner
        self.rate_kbit = rate_kbit
        tag = tag or str(os.getpid() % 100000)
        self.server_ns, self.device_ns = f"msb-srv-{tag}", f"msb-dev-{tag}"
        self.server_if, self.device_if = f"msbs{tag}", f"msbd{tag}"

    def __enter__(self) -> ThrottledLink:
        run = self.runner.run
        try:
            run(["ip", "netns", "add", self.server_ns])
            run(["ip", "netns", "add", self.device_ns])
            run(["ip", "link", "add", self.server_if, "type", "veth",
                 "peer", "name", self.device_if])
            run(["ip", "link", "set", self.server_if, "netns", self.server_ns])
            run(["ip", "link", "set", self.device_if, "netns", self.device_ns])
            for ns, ifname, addr in ((self.server_ns, self.server_if, SERVER_ADDR),
                                     (self.device_ns, self.device_if, DEVICE_ADDR)):
                run(["ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", ifname])
                run(["ip", "-n", ns, "link", "set", "lo", "up"])
                run(["ip", "-n", ns, "link", "set", ifname, "up"])
            # Token bucket on the download direction: the rate an LTE link gives the device.
            run(["tc", "-n", self.server_ns, "qdisc", "add", "dev", self.server_if, "root",
                 "tbf", "rate", f"{self.rate_kbit}kbit", "burst", "32kbit",
                 "latency", "400ms"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # Deleting a namespace deletes the veth end inside it, and with it the pair.
        for ns in (self.server_ns, self.device_ns):
            self.runner.run(["ip", "netns", "del", ns], check=False)

    @property
    def rate_bits(self) -> int:
        return self.rate_kbit * 1000

    def device_argv(self, argv: list[str]) -> list[str]:
        """Run argv on the device's side of the link."""
        return ["ip", "netns", "exec", self.device_ns, *argv]

    def make_in_server_ns(self, factory: Callable[[], T]) -> T:
        return in_netns(self.server_ns, factory)

    def server_tx_bytes(self) -> int:
        """Bytes the server side has put on the wire (Ethernet frames), from the veth counters."""
        out = self.runner.output(["ip", "-j", "-s", "-n", self.server_ns, "link", "show",
                                  "dev", self.server_if])
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])
