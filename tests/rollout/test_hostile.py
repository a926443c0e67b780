"""The collector against crafted input and hostile clients: every verdict or key the crypto
library cannot handle, and JSON nested thousands deep, is refused in one line and counted;
`collect` records the good files around a bad one; a device cannot halt a rollout through
a wave that is not open or not its own; a client that dribbles its headers or its body, or
hangs up, is dropped with one log line and no traceback, while the collector goes on.

Integration tier: real openssl keys, real GPG signatures of the statement, real SQLite, and
`rollout serve` as its own process for the hostile clients."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from builder.rollout.admin import status
from builder.rollout.collector import Collector, Limits
from builder.rollout.store import Store
from tests.rollout.support import REF, T0, devices, make_site, rollout_of, signer
from tests.rollout.test_serve import collector as serving
from tests.support.cli import run_cli
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration


def _collector(tmp_path: Path, release_key: ReleaseKey, **limits: int) -> Collector:
    key, _ = release_key
    site = make_site(tmp_path / "site", key, "site=lab,50%")
    return Collector(site, Store(tmp_path / "rollout.db"), signer(key), False,
                     lambda line: None, Limits(**limits))


def _envelope(public_key: str, payload: bytes = b"{}") -> bytes:
    return json.dumps({"format": "microshift-edge-builder/rollout-verdict/v1",
                       "payload": base64.b64encode(payload).decode(),
                       "signature": base64.b64encode(b"x" * 64).decode(),
                       "public_key": public_key}).encode()


def _public_key(tmp_path: Path, *args: str) -> str:
    """A public key openssl makes: `args` of `openssl genpkey` or `ecparam`."""
    private = tmp_path / f"key-{len(list(tmp_path.glob('key-*')))}.pem"
    if args[0] == "ecparam":
        subprocess.run(["openssl", *args, "-genkey", "-noout", "-out", private], check=True,
                       capture_output=True)
    else:
        subprocess.run(["openssl", "genpkey", *args, "-out", private], check=True,
                       capture_output=True)
    return subprocess.run(["openssl", "pkey", "-in", private, "-pubout"], check=True,
                          capture_output=True, text=True).stdout


DEEP = b'{"format": ' + b"[" * 5000 + b"]" * 5000 + b"}"
CRAFTED: dict[str, bytes | None] = {
    "deep JSON": DEEP,
    "deep payload": None,   # made in the test: a good envelope around a deep payload
    "a 5000-digit number": b'{"format": ' + b"9" * 5000 + b"}",
    "a key given twice": b'{"format": "a", "format": "b"}',
    "NaN": b'{"format": NaN}',
    "not UTF-8": b'{"format": "\xff"}',
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_json_is_refused_as_malformed_and_counted(tmp_path: Path,
                                                          release_key: ReleaseKey,
                                                          case: str) -> None:
    collector = _collector(tmp_path, release_key)
    body = CRAFTED[case] or _envelope(_public_key(tmp_path, "-algorithm", "ed25519"),
                                      b"[" * 3000 + b"]" * 3000)
    code, answer = collector.take(body)
    assert (code, answer["refused"]) == (400, "malformed")
    assert "\n" not in answer["detail"] and len(answer["detail"]) < 300
    assert collector.store.refusals() == {"malformed": 1}


@pytest.mark.parametrize(("args", "words"), [
    (("ecparam", "-name", "sect571r1"), "Curve 1.3.132.0.39 is not supported"),
    (("ecparam", "-name", "brainpoolP512t1"), "is not supported"),
    (("-algorithm", "x448"), "public_key is an X448 key; allowed: an Ed25519 key"),
    (("-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
     "public_key is an EC key; allowed: an Ed25519 key"),
])
def test_a_key_the_crypto_library_cannot_use_is_refused_not_a_500(
        tmp_path: Path, release_key: ReleaseKey, args: tuple[str, ...], words: str) -> None:
    collector = _collector(tmp_path, release_key)
    code, answer = collector.take(_envelope(_public_key(tmp_path, *args)))
    assert (code, answer["refused"]) == (400, "malformed") and words in answer["detail"]
    assert collector.store.refusals() == {"malformed": 1}


def test_enrolling_such_a_key_is_one_line(tmp_path: Path, release_key: ReleaseKey,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    site = make_site(tmp_path / "site", release_key[0]).root
    odd = tmp_path / "odd.pem"
    odd.write_text(_public_key(tmp_path, "ecparam", "-name", "sect571r1"))
    huge = tmp_path / "huge.pem"
    huge.write_bytes(b"A" * 100_000)
    for path, words in ((odd, "is not supported"), (huge, "is over 8192 bytes")):
        assert run_cli("rollout", "enroll", "--site", site, "--db", tmp_path / "r.db",
                       "0" * 32, path) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_collect_records_the_good_files_around_a_bad_one(tmp_path: Path,
                                                         release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    stick = tmp_path / "stick"
    stick.mkdir()
    one, two = devices(tmp_path, 2)
    (stick / "1.json").write_bytes(one.verdict("staged"))
    (stick / "2.json").write_bytes(DEEP)
    (stick / "3.json").write_bytes(_envelope(_public_key(tmp_path, "ecparam", "-name",
                                                         "sect571r1")))
    (stick / "4.json").write_bytes(two.verdict("staged"))
    tally, problems = collector.collect([stick])
    assert tally == {"recorded": 2, "malformed": 2}
    assert [line.split(":")[0] for line in problems] == [str(stick / "2.json"),
                                                         str(stick / "3.json")]
    assert status(collector.site, collector.store, REF, T0)["waves"][0]["staged"] == 2


def test_a_device_cannot_halt_a_rollout_through_a_wave_that_is_not_open(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    """Wave 1 (site=lab) is open, wave 2 is not: an enrolled device claiming wave 2 with
    staged then rolled-back is refused, and the rollout stays active."""
    collector = _collector(tmp_path, release_key)
    device = devices(tmp_path, 1)[0]
    collector.store.enroll(device.machine_id, device.outbox.key.public_pem())
    for event in ("staged", "rolled-back"):
        code, answer = collector.take(device.verdict(event, wave=1, boots=3))
        assert (code, answer["refused"]) == (409, "wave-not-open"), answer
        assert "wave 2" in answer["detail"] and "is not open" in answer["detail"]
    assert rollout_of(collector.site).state == "active"
    assert collector.store.refusals() == {"wave-not-open": 2}
    waves = status(collector.site, collector.store, REF, T0)["waves"]
    assert all(w["staged"] == w["rolled_back"] == 0 for w in waves)


def test_a_device_cannot_claim_a_wave_its_labels_do_not_put_it_in(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    device = devices(tmp_path, 1)[0]
    # Wave 1 selects site=lab; this device says it has no labels, so it is not in wave 1.
    code, answer = collector.take(device.verdict("rolled-back", wave=0, labels={}))
    assert (code, answer["refused"]) == (409, "wrong-wave")
    assert "not in wave 1" in answer["detail"]
    # Its first good verdict pins its labels; another set later is refused.
    assert collector.take(device.verdict("staged"))[0] == 201
    code, answer = collector.take(device.verdict("green", labels={"site": "lab", "x": "y"}))
    assert (code, answer["refused"]) == (403, "foreign-labels")
    assert rollout_of(collector.site).state == "active"


def test_labels_pinned_at_enrolment_decide(tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    device = devices(tmp_path, 1)[0]
    collector.store.enroll(device.machine_id, device.outbox.key.public_pem(),
                           {"site": "madrid"})
    code, answer = collector.take(device.verdict("staged"))   # claims site=lab
    assert (code, answer["refused"]) == (403, "foreign-labels")


def test_a_device_is_limited_in_verdicts_per_rollout(tmp_path: Path,
                                                     release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key, max_verdicts=3)
    device, other = devices(tmp_path, 2)
    codes = [collector.take(device.verdict("offered"))[0] for _ in range(5)]
    assert codes == [201, 201, 201, 429, 429]
    assert collector.store.refusals() == {"too-many": 2}
    assert collector.take(other.verdict("offered"))[0] == 201   # one device's limit only


# --- hostile clients against `rollout serve` ---------------------------------------------
def _connect(url: str) -> socket.socket:
    host, port = url.split("//")[1].split("/", maxsplit=1)[0].split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (sending what it may)."""
    sock.settimeout(0.2)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            sock.send(b"x")
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def test_slow_clients_are_dropped_and_hang_ups_are_one_line(tmp_path: Path,
                                                            release_key: ReleaseKey) -> None:
    site = make_site(tmp_path / "site", release_key[0]).root
    with serving(site, tmp_path / "rollout.db", "--header-timeout", "1",
                 "--request-timeout", "1") as (proc, url):
        slowloris = _connect(url)
        slowloris.send(b"POST /verdicts HTTP/1.1\r\nHost: x\r\n")   # and never the end
        slow_body = _connect(url)
        slow_body.send(b"POST /verdicts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        hang_up = _connect(url)
        hang_up.send(b"POST /verdicts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        hang_up.close()
        started = time.monotonic()
        assert _closed_within(slowloris, 10) and _closed_within(slow_body, 10)
        assert time.monotonic() - started < 10
        good = devices(tmp_path, 1)[0]
        answers = [_post(url, body) for body in (DEEP, good.verdict("staged"))]
        assert answers == [400, 201]   # the collector goes on
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    assert "Traceback" not in err, err
    assert "dropped a slow client" in err and "no complete request headers within 1 s" in err
    assert "hung up before its verdict was whole" in err or "no whole verdict" in err


def _post(url: str, body: bytes) -> int:
    with _connect(url) as sock:
        sock.sendall(b"POST /verdicts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])
