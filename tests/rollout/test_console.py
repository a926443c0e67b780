"""The console's HTTP surface on a running collector (`rollout serve`): the pages ship in the
package with a strict Content-Security-Policy; the API says what `rollout status --json` and
`rollout devices --json` say; the actions do what the commands do (a signed statement, the
same refusals) and are recorded. Hostile clients: missing or wrong tokens, a guessing
client, cross-site requests a browser could be made to send (HTML forms, other origins),
oversized and malformed bodies, a ref that names a path: each refused with its status and
one message, the statement untouched. A token file others can read is refused at start.

Integration tier: the collector as its own process, real GPG, real SQLite, openssl keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.rollout.store import Store
from tests.rollout.console_support import ADMIN, VIEWER, Api, cli_json, console, token_file
from tests.rollout.support import REF, devices, make_site, rollout_of, statement_verifies
from tests.support.cli import PROJECT_ROOT
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration


def _site(tmp_path: Path, release_key: ReleaseKey) -> Path:
    site = make_site(tmp_path / "site", release_key[0]).root
    for device in devices(tmp_path / "devices", 3):
        device.outbox.add({"machine_id": device.machine_id, "ref": REF,
                           "rollout": "fleet-test", "commit": "c" * 64, "wave": 0,
                           "event": "staged", "from_commit": "", "from_version": "1.0",
                           "version": "2.0", "boots": 0, "failed_check": "",
                           "labels": {"site": "lab"}})
    return site


def _send_all(tmp_path: Path, api: Api) -> None:
    for device in devices(tmp_path / "devices", 3):
        for path in device.outbox.pending():
            code, _, _ = api.call("POST", "/verdicts", path.read_bytes())
            assert code == 201


def test_the_pages_ship_in_the_package_with_a_strict_policy(tmp_path: Path,
                                                          release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    with console(site, tmp_path / "rollout.db", release_key[0], tmp_path) as (_, api):
        code, headers, _ = api.call("GET", "/")
        assert code == 302 and headers["Location"] == "/console/"
        code, headers, page = api.call("GET", "/console/")
        assert code == 200 and headers["Content-Type"].startswith("text/html")
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        # Nothing from elsewhere: every script and style the page loads is the collector's.
        assert "http" not in page.replace("http-equiv", "")
        for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
            code, headers, _ = api.call("GET", f"/console/{name}")
            assert code == 200 and headers["Content-Type"].startswith(kind), name
            assert headers["X-Content-Type-Options"] == "nosniff"
        for path in ("/console/../store.py", "/console/%2e%2e%2fstore.py",
                     "/console/history.py"):
            assert api.call("GET", path)[0] == 404, path


def test_the_api_says_what_the_commands_say(tmp_path: Path, release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    db = tmp_path / "rollout.db"
    with console(site, db, release_key[0], tmp_path) as (_, api):
        _send_all(tmp_path, api)
        code, overview = api.get("/api/overview")
        assert code == 200
        report = cli_json("status", "--site", site, "--db", db)
        live = overview["rollouts"][REF]
        assert live["waves"][0]["staged"] == 3
        assert {k: v for k, v in live.items() if k != "waves"} == \
            {k: v for k, v in report.items() if k != "waves"}
        for mine, theirs in zip(live["waves"], report["waves"], strict=True):
            assert {k: v for k, v in mine.items() if k != "soaked_seconds"} == \
                {k: v for k, v in theirs.items() if k != "soaked_seconds"}
        code, inventory = api.get("/api/devices")
        assert code == 200
        assert inventory["devices"] == cli_json("devices", "--db", db)["devices"]
        code, timeline = api.get("/api/verdicts?limit=2")
        assert code == 200 and [v["event"] for v in timeline["verdicts"]] == ["staged"] * 2
        assert api.get("/api/verdicts?limit=0")[0] == 400
        assert overview["history"][0]["devices"] == 3


def test_a_halt_and_resume_from_the_console_are_what_the_commands_do(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    db = tmp_path / "rollout.db"
    with console(site, db, release_key[0], tmp_path) as (_, api):
        code, answer = api.act("halt", ref=REF, reason="canary failed on the line")
        assert code == 200 and answer["rollout"]["state"] == "halted"
        assert rollout_of(make_site_of(site)).reason == "canary failed on the line"
        assert statement_verifies(make_site_of(site), release_key[1])
        code, answer = api.act("halt", ref=REF)          # the command's answer: already
        assert code == 200 and answer["rollout"]["state"] == "halted"
        code, answer = api.act("advance", ref=REF)
        assert code == 409 and "is halted (canary failed on the line)" in answer["error"]
        code, answer = api.act("resume", ref=REF)
        assert code == 200 and answer["rollout"]["state"] == "active"
        # Wave 1 opened at the tests' T0, in the future: it has not soaked, as the command
        # says; the statement is not re-signed.
        before = (site / "updates" / REF / "timestamp.json").read_bytes()
        code, answer = api.act("advance", ref=REF)
        assert code == 409 and "has soaked" in answer["error"], answer
        assert (site / "updates" / REF / "timestamp.json").read_bytes() == before
        code, answer = api.act("advance", ref=REF, force=True)
        assert code == 200 and answer["rollout"]["waves"][1]["opened"] is not None
        _, overview = api.get("/api/overview")
    outcomes = [(a["action"], a["outcome"]) for a in reversed(overview["actions"])]
    assert outcomes == [("halt", "done"), ("halt", "done"), ("advance", "refused"),
                        ("resume", "done"), ("advance", "refused"), ("advance", "done")]
    store = Store(db)
    assert store.db.execute("SELECT count(*) FROM actions").fetchone()[0] == 6
    store.close()


def make_site_of(root: Path):  # type: ignore[no-untyped-def]
    from builder.rollout.admin import Site
    return Site(root)


def test_actions_need_the_admin_token_and_refuse_what_another_site_could_send(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    statement = site / "updates" / REF / "timestamp.json"
    before = statement.read_bytes()
    with console(site, tmp_path / "rollout.db", release_key[0], tmp_path) as (proc, api):
        assert api.act("halt", token=None, ref=REF)[0] == 401
        assert api.act("halt", token=VIEWER, ref=REF)[0] == 401
        assert api.act("halt", token=ADMIN + "x", ref=REF)[0] == 401
        good = {"Authorization": f"Bearer {ADMIN}"}
        form = api.call("POST", "/api/actions/halt", b"ref=" + REF.encode(),
                        {**good, "Content-Type": "application/x-www-form-urlencoded"})
        assert form[0] == 415
        json_headers = {**good, "Content-Type": "application/json"}
        body = json.dumps({"ref": REF}).encode()
        for extra, code in (({"Origin": "http://evil.example"}, 403),
                            ({"Sec-Fetch-Site": "cross-site"}, 403)):
            assert api.call("POST", "/api/actions/halt", body, {**json_headers, **extra}
                            )[0] == code, extra
        assert api.call("POST", "/api/actions/halt", b"x" * 5000, json_headers)[0] == 413
        assert api.call("POST", "/api/actions/halt", b"{" * 3000, json_headers)[0] == 400
        assert api.call("POST", "/api/actions/halt", b"[1]", json_headers)[0] == 400
        assert api.act("halt", ref=REF, reason="x" * 201)[0] == 400
        assert api.act("halt", ref=REF, reason="line\nbreak")[0] == 400
        assert api.act("halt", ref=REF, force="yes")[0] == 400
        assert api.act("halt", ref=REF, extra=1)[0] == 400
        assert api.act("reboot-everything", ref=REF)[0] == 404
        assert api.act("halt", ref="../../..")[0] == 404
        assert statement.read_bytes() == before           # nothing above changed it
        # A client guessing tokens: after ten wrong ones (three above), even the right one
        # waits.
        for _ in range(7):
            api.act("halt", token="guess-" + "0" * 20, ref=REF)
        code, answer = api.act("halt", ref=REF)
        assert code == 429 and "too many wrong tokens" in answer["error"]
        assert statement.read_bytes() == before
    assert proc.returncode in (0, -15)


def test_a_viewer_token_closes_the_read_only_pages(tmp_path: Path,
                                                   release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    viewer = token_file(tmp_path / "viewer.token", VIEWER)
    with console(site, tmp_path / "rollout.db", None, tmp_path,
                 "--viewer-token-file", str(viewer)) as (_, api):
        assert api.get("/api/overview")[0] == 401
        assert api.get("/api/devices", "wrong-" + "1" * 20)[0] == 401
        assert api.get("/api/overview", VIEWER)[0] == 200
        assert api.get("/api/overview", ADMIN)[0] == 200
        assert api.call("GET", "/console/")[0] == 200      # the page holds no data
        # Without the release key no action can be signed: refused, and said why.
        code, answer = api.act("halt", ref=REF)
        assert code == 503 and "no release key" in answer["error"]


def test_a_token_file_others_can_read_is_refused_at_start(tmp_path: Path,
                                                          release_key: ReleaseKey) -> None:
    site = _site(tmp_path, release_key)
    loose = token_file(tmp_path / "admin.token", ADMIN)
    loose.chmod(0o644)
    short = token_file(tmp_path / "short.token", "hunter2")
    for path, problem in ((loose, "is readable by others"), (short, "is not a token")):
        result = subprocess.run(
            [sys.executable, "-m", "builder", "rollout", "serve", "--site", str(site),
             "--db", str(tmp_path / "rollout.db"), "--admin-token-file", str(path)],
            capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False)
        assert result.returncode == 2, result.stderr
        assert problem in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
