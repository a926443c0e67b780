"""`python -m builder rollout serve`, the collector as devices meet it: verdicts POSTed from
the devices' outboxes over HTTP, and a collector killed with SIGKILL in the middle of a stream
of them loses none (what it answered is on disk; what it did not, the devices send again).
Then `rollout status --json` and `rollout collect` from the command line.

Integration tier: the collector runs as its own process (aiohttp, SQLite)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from builder.rollout.store import Store
from builder.updater.fetch import Patience
from tests.rollout.support import REF, devices, make_site, rollout_of, statement_verifies
from tests.support.cli import PROJECT_ROOT, run_cli
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration
EVENTS = ("offered", "downloaded", "staged")


@contextmanager
def collector(site: Path, db: Path, *options: str
              ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "builder", "--json", "rollout", "serve",
                             "--site", str(site), "--db", str(db), "--listen", "127.0.0.1:0",
                             *options],
                            stderr=subprocess.PIPE, env=env, cwd=PROJECT_ROOT)
    try:
        assert proc.stderr is not None
        for line in iter(proc.stderr.readline, b""):
            url = json.loads(line).get("url")
            if url:
                break
        else:
            pytest.fail(f"the collector exited ({proc.wait()}) without listening")
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=30)


def test_a_collector_killed_mid_stream_loses_no_verdict(tmp_path: Path,
                                                        release_key: ReleaseKey) -> None:
    site = make_site(tmp_path / "site", release_key[0]).root
    db = tmp_path / "rollout.db"
    fleet = devices(tmp_path, 30)
    for device in fleet:
        for event in EVENTS:
            device.outbox.add({"machine_id": device.machine_id, "ref": REF,
                               "rollout": "fleet-test", "commit": "c" * 64, "wave": 0,
                               "event": event, "from_commit": "", "from_version": "",
                               "version": "", "boots": 0, "failed_check": "",
                               "labels": {"site": "lab"}})
    total = len(fleet) * len(EVENTS)
    with collector(site, db) as (proc, url):
        stop = threading.Event()

        def stream() -> None:
            for device in fleet:
                if stop.is_set():
                    return
                device.outbox.send(url, Patience(timeout=5.0), lambda line: None)

        sender = threading.Thread(target=stream)
        sender.start()
        while sum(len(d.outbox.pending()) for d in fleet) > total * 2 // 3:
            threading.Event().wait(0.01)
        proc.send_signal(signal.SIGKILL)
        stop.set()
        sender.join()
    answered = total - sum(len(d.outbox.pending()) for d in fleet)
    assert 0 < answered < total
    store = Store(db)
    assert store.verdict_count() >= answered   # every answered verdict is on disk
    store.close()
    with collector(site, db) as (_, url):
        for device in fleet:   # the devices' next runs
            device.outbox.send(url, Patience(timeout=5.0), lambda line: None)
        assert all(not d.outbox.pending() for d in fleet)
    store = Store(db)
    assert store.verdict_count() == total and store.refusals() == {}
    store.close()
    assert run_cli("rollout", "status", "--site", site, "--db", db, "--json") == 0


def test_status_and_collect_from_the_command_line(tmp_path: Path, release_key: ReleaseKey,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    site = make_site(tmp_path / "site", release_key[0]).root
    db = tmp_path / "rollout.db"
    stick = tmp_path / "usb"
    for device in devices(tmp_path, 3):
        (stick / device.machine_id).mkdir(parents=True)
        (stick / device.machine_id / "v.json").write_bytes(device.verdict("green"))
    (stick / "garbage.json").write_text("{}")
    # Every good file is recorded, the bad one named; the exit status says one was refused.
    assert run_cli("rollout", "collect", "--site", site, "--db", db,
                   *sorted(stick.iterdir())) == 1
    err = capsys.readouterr().err
    assert "verdict files: malformed 1, recorded 3" in err
    assert f"{stick / 'garbage.json'}: refused (malformed): verdict: format is missing" in err
    assert run_cli("rollout", "status", "--site", site, "--db", db, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["waves"][0]["green"] == 3 and report["refused"] == {"malformed": 1}
    assert run_cli("rollout", "status", "--site", site, "--db", db) == 0
    text = capsys.readouterr().out
    assert "1. site=lab" in text and "refused verdicts: malformed 1" in text
    assert run_cli("rollout", "status", "--site", tmp_path / "nowhere") == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_admin_commands_change_the_signed_statement(
        tmp_path: Path, release_key: ReleaseKey, capsys: pytest.CaptureFixture[str]) -> None:
    key, public = release_key
    site = make_site(tmp_path / "site", key)
    signing = ["--site", site.root, "--gpg-homedir", key.homedir, "--gpg-key", key.key_id]
    assert run_cli("rollout", "halt", *signing, "--reason", "field report") == 0
    assert rollout_of(site).state == "halted" and rollout_of(site).reason == "field report"
    assert statement_verifies(site, public)
    assert run_cli("rollout", "resume", *signing) == 0
    assert rollout_of(site).state == "active"
    # advance needs the collector's database: a wrong --db is one line, not a new database.
    assert run_cli("rollout", "advance", *signing, "--db", tmp_path / "typo.db") == 2
    assert not (tmp_path / "typo.db").exists()
    assert run_cli("rollout", "halt", "--site", site.root) == 2   # no release key
    assert run_cli("rollout", "start", *signing, "--ref", REF, "--rollout-waves", "5%") == 1
    assert "is already active" in capsys.readouterr().err
    assert rollout_of(site).id == "fleet-test"
