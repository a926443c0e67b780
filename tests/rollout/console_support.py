"""The collector with its console, as an admin starts it (`rollout serve --admin-token-file`),
and a small HTTP client for the console's API."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from builder.core.signing import SigningKey
from tests.rollout.test_serve import collector
from tests.support.cli import PROJECT_ROOT

ADMIN = "admin-" + "7" * 40
VIEWER = "viewer-" + "3" * 40


def token_file(path: Path, token: str) -> Path:
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


@dataclass
class Api:
    base: str   # http://127.0.0.1:PORT

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Any]:
        """(status, headers, JSON answer or the text) of one request."""
        parts = urlsplit(self.base)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            raw = response.read()
            kind = response.getheader("Content-Type", "")
            answer = json.loads(raw) if kind.startswith("application/json") else raw.decode()
            return response.status, dict(response.getheaders()), answer
        finally:
            connection.close()

    def act(self, action: str, token: str | None = ADMIN, **body: Any
            ) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        code, _, answer = self.call("POST", f"/api/actions/{action}",
                                    json.dumps(body).encode(), headers)
        return code, answer

    def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        code, _, answer = self.call("GET", path, headers=headers)
        return code, answer


@contextmanager
def console(site: Path, db: Path, key: SigningKey | None, tmp: Path, *options: str
            ) -> Iterator[tuple[subprocess.Popen[bytes], Api]]:
    """`rollout serve` with the release key (when given) and the admin token."""
    signing = [] if key is None else ["--gpg-homedir", str(key.homedir), "--gpg-key",
                                      key.key_id]
    admin = token_file(tmp / "admin.token", ADMIN)
    with collector(site, db, *signing, "--admin-token-file", str(admin), *options) \
            as (proc, url):
        yield proc, Api(url.removesuffix("/verdicts"))


def cli_json(*args: str | Path) -> Any:
    """A `rollout` command's --json output, as the admin's terminal shows it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "builder", "rollout", *map(str, args),
                             "--json"], capture_output=True, text=True, env=env,
                            cwd=PROJECT_ROOT, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
