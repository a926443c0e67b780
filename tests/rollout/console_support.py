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
from tests.support.browser import wait_for
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


FIELDS = ("offered", "downloaded", "staged", "green", "rolled_back", "silent")
# Read in one script, so no re-render of the page falls between two cells.
READ_WAVES = """
return [...document.querySelectorAll('article[data-ref="' + arguments[0] + '"] tr[data-wave]')]
  .map(row => Object.fromEntries(arguments[1].map(name =>
    [name, Number(row.querySelector('td[data-field="' + name + '"]').textContent)])));
"""
READ_DEVICES = """
return Object.fromEntries([...document.querySelectorAll('#devices tbody tr')].map(row =>
  [row.dataset.machineId, ['wave', 'event', 'booted'].map(name =>
    row.querySelector('td[data-field="' + name + '"]').textContent)]));
"""


@dataclass
class ConsolePage:
    """The console open in the browser, on one ref's rollout."""

    driver: Any
    ref: str

    def open(self, base: str, token: str = ADMIN) -> None:
        self.driver.get(base + "/")
        self.one("#token").send_keys(token + "\n")
        wait_for(self.driver, lambda: self.all(f'article[data-ref="{self.ref}"]'),
                 "the rollout")

    def one(self, css: str) -> Any:
        return self.driver.find_element("css selector", css)

    def all(self, css: str) -> list[Any]:
        found: list[Any] = self.driver.find_elements("css selector", css)
        return found

    def text(self, css: str) -> str:
        """The text of the first element `css` finds ("" for none), read in one script."""
        found: str = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
            css)
        return found

    def waves(self) -> list[dict[str, int]]:
        found: list[dict[str, int]] = self.driver.execute_script(READ_WAVES, self.ref,
                                                                 list(FIELDS))
        return found

    def devices(self) -> dict[str, tuple[str, ...]]:
        found = self.driver.execute_script(READ_DEVICES)
        return {machine: tuple(cells) for machine, cells in found.items()}

    def agrees(self, site: Path, db: Path) -> bool:
        """The page shows what the commands print (polled: the page updates itself)."""
        report = cli_json("status", "--site", site, "--db", db, "--ref", self.ref)
        wanted = [{name: wave[name] for name in FIELDS} for wave in report["waves"]]
        inventory = cli_json("devices", "--db", db)["devices"]
        rows = {d["machine_id"]: ("—" if d["wave"] is None else str(d["wave"] + 1),
                                  d["last_event"] or "—", d["booted_version"] or "?")
                for d in inventory}
        state = self.one(f'article[data-ref="{self.ref}"] [data-field="state"]').text
        return self.waves() == wanted and self.devices() == rows and \
            state == report["state"]

    def wait_agrees(self, site: Path, db: Path, what: str) -> None:
        wait_for(self.driver, lambda: self.agrees(site, db), what)

    def click(self, action: str) -> str:
        """Click the action's button; the answer the page shows."""
        button = self.one(f'article[data-ref="{self.ref}"] button[data-action="{action}"]')
        wait_for(self.driver, button.is_enabled, f"the {action} button enabled")
        self.driver.execute_script("document.getElementById('message').textContent = ''")
        button.click()
        return str(wait_for(self.driver, lambda: (text := self.one("#message").text)
                            and not text.endswith("…") and text, f"the answer to {action}"))
