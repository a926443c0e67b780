"""The pull path: `ostree pull` of the ref, when no delta file fits the booted commit.

The pull goes through the relay (builder/updater/relay.py) whenever the relay can carry all
of it: with a bandwidth cap the relay paces it; without one it still bounds each request
(timeout, low speed, the run's deadline). The `ostree pull` process itself ends at the
run's deadline. Where the relay cannot carry the pull (a metalink, contenturl or proxy),
ostree pulls by itself, bounded by the deadline only, and the log says so.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from builder.updater import apply
from builder.updater.fetch import Patience
from builder.updater.relay import Relay, Tls
from builder.updater.system import System

PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                   "ALL_PROXY")


@dataclass
class Pulled:
    commit: str
    received: int = 0        # bytes the relay carried (0: it did not carry the pull)
    requests: int = 0
    seconds: float = 0.0


def pull(system: System, remote: str, ref: str, cap: int, *, patience: Patience,
         log: Callable[[str], None]) -> Pulled:
    url = system.remote_option(remote, "url") or ""
    why_not = uncappable(system, remote, url, os.environ)
    if why_not:
        log(f"the pull is not {'capped at ' + str(cap) + ' B/s' if cap else 'relayed'}: "
            f"{why_not}; it is bounded by the run's deadline only")
        return Pulled(apply.pull(system, remote, ref, patience=patience))
    started = time.monotonic()
    with Relay(url, cap, remote_tls(system, remote), patience) as relay:
        log(f"ostree pull {remote}:{ref} through {relay.url}"
            + (f", capped at {cap} B/s" if cap else ""))
        try:
            commit = apply.pull(system, remote, ref, relay.url, patience=patience)
        finally:
            seconds = round(time.monotonic() - started, 3)
            log(f"pull: {relay.received} bytes from {url} in {relay.requests} requests, "
                f"{seconds:.1f}s")
    return Pulled(commit, relay.received, relay.requests, seconds)


def uncappable(system: System, remote: str, url: str, environ: Mapping[str, str]
               ) -> str | None:
    """Why the relay cannot carry every byte of a pull from this remote (whose URL is
    `url`), or None."""
    if not url.startswith(("http://", "https://")):
        return f"remote {remote!r} has no http(s) URL ({url or 'none'})"
    for key in ("metalink", "contenturl", "proxy"):
        if system.remote_option(remote, key):
            return f"remote {remote!r} has a {key}, which ostree uses whatever URL it is given"
    variables = [v for v in PROXY_VARIABLES if environ.get(v)]
    if variables:
        return f"{variables[0]} is set: the pull goes through that proxy"
    return None


def remote_tls(system: System, remote: str) -> Tls:
    option = functools.partial(system.remote_option, remote)
    return Tls(permissive=(option("tls-permissive") or "false").lower() == "true",
               ca_path=option("tls-ca-path"), client_cert=option("tls-client-cert-path"),
               client_key=option("tls-client-key-path"))
