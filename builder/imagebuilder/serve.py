"""Serve DIR/ostree/repo over HTTP to the service's workers while a compose runs.

The workers fetch the parent commit from the `url` of the compose request (osbuild/images
makeOSTreeParentCommit -> an org.osbuild.ostree source; the parent's /etc/passwd and group
keep user ids stable across updates), and an installer compose embeds the commit the `url`
serves. An archive repository is plain static files, so a read-only file server is enough.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from builder.core.errors import InputError
from builder.core.http_thread import ServedInThread
from builder.core.progress import Progress

ADDRESS_RE = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")
UNREACHABLE_HOSTS = ("0.0.0.0", "[::]")


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the workers' requests are not this command's output


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def parse_address(address: str) -> tuple[str, int]:
    match = ADDRESS_RE.match(address)
    if match is None or not 0 <= int(match.group("port")) <= 65535:
        raise InputError("command line", "--serve-repo", f"{address!r} is not HOST:PORT; give "
                         "this machine's address as the workers reach it, e.g. 10.0.0.5:8000")
    host = match.group("host")
    if host in UNREACHABLE_HOSTS:
        raise InputError("command line", "--serve-repo", f"{host} is not an address the "
                         "workers can reach; give this machine's address, e.g. 10.0.0.5:8000")
    return host.strip("[]"), int(match.group("port"))


@contextmanager
def serve_repo(repo: Path, address: str, progress: Progress) -> Iterator[str]:
    """Serve `repo` at HOST:PORT for the length of the block; yields its URL."""
    host, port = parse_address(address)
    try:
        httpd = _Server((host, port), partial(_Handler, directory=str(repo)))
    except OSError as exc:
        raise InputError("command line", "--serve-repo", f"cannot listen on {address}: "
                         f"{exc.strerror or exc}; pick a free port on an address of this "
                         "machine") from exc
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{httpd.server_address[1]}/"
    with ServedInThread(httpd, "composer-repo"):
        progress.info(f"serving {repo} to the workers at {url}", url=url)
        yield url
