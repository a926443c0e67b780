"""HTTP over a unix socket for requests, so the Weldr client reaches /run/weldr/api.socket.

osbuild-composer's Weldr API listens on a unix socket (systemd socket activation of
osbuild-composer.socket). requests only speaks TCP, and requests-unixsocket is not a
dependency we want, so this module plugs a tiny urllib3 connection pool into a requests
HTTPAdapter: the URL keeps a dummy host and the adapter always dials the socket path.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

UNIX_SCHEME = "http+unix"
# The host part of http+unix:// URLs. It is never resolved; it only ends up in the Host
# header, which the Weldr API ignores.
UNIX_HOST = "localhost"


class _UnixHTTPConnection(HTTPConnection):
    """An HTTP connection whose socket is a unix stream socket at a fixed path."""

    def __init__(self, socket_path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.socket_path = socket_path

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # urllib3 stores a sentinel instead of None for "default timeout"; only numbers count.
        timeout = self.timeout if isinstance(self.timeout, int | float) else None
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.socket_path))
        except TimeoutError as exc:
            sock.close()
            raise ConnectTimeoutError(self, f"connect to {self.socket_path} timed out") from exc
        except OSError as exc:
            sock.close()
            # Same exception type urllib3 raises for TCP, so requests maps it to
            # ConnectionError and callers treat both transports alike.
            raise NewConnectionError(self, f"cannot connect to {self.socket_path}: {exc}") from exc
        return sock


class _UnixHTTPConnectionPool(HTTPConnectionPool):
    def __init__(self, socket_path: Path, **kwargs: Any) -> None:
        super().__init__(UNIX_HOST, **kwargs)
        self.socket_path = socket_path

    def _new_conn(self) -> HTTPConnection:
        self.num_connections += 1
        return _UnixHTTPConnection(
            self.socket_path, host=UNIX_HOST, port=None, timeout=self.timeout.connect_timeout)


class UnixSocketAdapter(HTTPAdapter):
    """Send every request mounted on http+unix:// to one unix socket."""

    def __init__(self, socket_path: Path) -> None:
        # Retries are the client's business (it knows which failures are transient).
        super().__init__(max_retries=0)
        self.socket_path = socket_path
        self._pool = _UnixHTTPConnectionPool(socket_path, maxsize=4)

    def get_connection_with_tls_context(
        self,
        request: requests.PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: Any = None,
    ) -> HTTPConnectionPool:
        return self._pool

    def close(self) -> None:
        self._pool.close()
        super().close()


def unix_session(socket_path: Path) -> requests.Session:
    """A requests session whose http+unix://localhost/... URLs go to `socket_path`."""
    session = requests.Session()
    # Proxy variables from the environment must never redirect a local socket.
    session.trust_env = False
    session.mount(f"{UNIX_SCHEME}://", UnixSocketAdapter(socket_path))
    return session
