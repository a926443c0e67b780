"""A device cannot be frozen on an old release: what a hostile mirror or a man in the middle
can serve (a flipped summary or summary.sig, an unsigned summary pointing back, a replayed
older signed summary or index, an expired statement) is refused with a line naming it, the
device stays on its commit, and `microshift-update status` says why.

Integration tier: the shipped updater against the published site served over HTTP, with real
ostree (gpg-verify-summary=true on the device's remote) and real GPG signatures.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.ostree import Repo
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey, ensure_sample_key, stop_agent
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.statement_signing import sign_timestamp
from builder.updater.freshness import ACCEPTED, TIMESTAMP
from tests.device.site import SIM, booted_device, refused, sign_index, site, status, updates
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace")]


@pytest.fixture
def key(pair: UpdatePair) -> Iterator[SigningKey]:
    """The release key the device trusts (the sample pair's)."""
    runner = Runner()
    assert pair.public_key is not None
    signing = ensure_sample_key(runner, Progress(), pair.public_key.parent, 0)
    yield signing
    stop_agent(runner, signing.homedir)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _pull_only(repo: Path) -> None:
    """No delta file from v1: the updater falls back to an ostree pull of the ref, which
    believes the summary."""
    index = updates(repo) / "index.json"
    document = json.loads(index.read_text())
    document["files"] = []
    index.write_text(json.dumps(document))


def _summary_back_to_v1(repo: Path, pair: UpdatePair, key: SigningKey | None) -> None:
    """The summary an old publish made: the ref at v1 (signed by the release key when given,
    as a replayed old summary is)."""
    archive = Repo(repo, Runner())
    archive.set_ref(SAMPLE_REF, pair.v1)
    (repo / "summary.sig").unlink(missing_ok=True)
    archive.summary_update(key)


def _resign(pair: UpdatePair, repo: Path, key: SigningKey, validity: int = 3600) -> None:
    sign_index(pair, updates(repo) / "index.json", validity)


@pytest.mark.parametrize("damaged", ["summary", "summary.sig"])
def test_a_flipped_summary_or_signature_is_refused(pair: UpdatePair, tmp_path: Path,
                                                   key: SigningKey, damaged: str) -> None:
    repo = site(pair, tmp_path)
    _pull_only(repo)
    _resign(pair, repo, key)
    _flip(repo / damaged)
    device = booted_device(pair, tmp_path)
    refused(device, repo, pair, f"ostree pull edge:{SAMPLE_REF} failed: ")
    assert "BAD signature" in status(device)


def test_an_unsigned_summary_pointing_back_is_refused(pair: UpdatePair,
                                                      tmp_path: Path, key: SigningKey) -> None:
    repo = site(pair, tmp_path)
    _pull_only(repo)
    _resign(pair, repo, key)
    _summary_back_to_v1(repo, pair, None)
    device = booted_device(pair, tmp_path)
    refused(device, repo, pair, "GPG verification enabled, but no summary.sig found")


def test_a_replayed_signed_summary_is_refused_by_the_current_index(
        pair: UpdatePair, tmp_path: Path, key: SigningKey) -> None:
    repo = site(pair, tmp_path)
    _pull_only(repo)
    _resign(pair, repo, key)
    _summary_back_to_v1(repo, pair, key)
    refused(booted_device(pair, tmp_path), repo, pair,
             f"names {pair.v1[:12]} for {SAMPLE_REF}, the signed index {pair.v2[:12]}: "
             "a stale or replayed summary")


def test_an_expired_statement_is_refused(pair: UpdatePair, tmp_path: Path,
                                         key: SigningKey) -> None:
    repo = site(pair, tmp_path)
    out = updates(repo)
    runner = Runner()
    stamp = sign_timestamp(runner, key, out, SAMPLE_REF, 3600)
    # An hour-long statement issued two hours ago: what a replay of last week's looks like.
    document = json.loads((out / TIMESTAMP).read_text())
    document.update(issued=stamp.issued - 7200, expires=stamp.issued - 3600)
    (out / TIMESTAMP).write_text(json.dumps(document))
    from builder.core.signing import sign_detached

    sign_detached(runner, key, out / TIMESTAMP)
    refused(booted_device(pair, tmp_path), repo, pair, "expired at")


def test_a_missing_statement_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    (updates(repo) / TIMESTAMP).unlink()
    refused(booted_device(pair, tmp_path), repo, pair, f"{TIMESTAMP} is missing")


def test_a_statement_for_another_index_is_refused(pair: UpdatePair,
                                                  tmp_path: Path, key: SigningKey) -> None:
    """An old signed index served with the current statement (or the other way round)."""
    repo = site(pair, tmp_path)
    index = updates(repo) / "index.json"
    index.write_text(index.read_text() + " ")
    from builder.core.signing import sign_detached

    sign_detached(Runner(), key, index)
    refused(booted_device(pair, tmp_path), repo, pair, "names another index")


def test_a_replayed_older_index_and_statement_are_refused(
        pair: UpdatePair, tmp_path: Path, key: SigningKey) -> None:
    """The device accepted a statement; the server (or a mirror) then serves one issued
    before it, still unexpired: a replay."""
    repo = site(pair, tmp_path)
    out = updates(repo)
    old = {name: (out / name).read_bytes() for name in (TIMESTAMP, TIMESTAMP + ".sig")}
    device = booted_device(pair, tmp_path, commit=pair.v2)
    newer = json.loads(old[TIMESTAMP])["issued"] + 60
    document = {**json.loads(old[TIMESTAMP]), "issued": newer, "expires": newer + 3600}
    (out / TIMESTAMP).write_text(json.dumps(document))
    from builder.core.signing import sign_detached

    sign_detached(Runner(), key, out / TIMESTAMP)
    _, deployment = run_updater(device, repo, UpdateOptions(config=SIM))
    assert deployment.checksum == pair.v2 and "up to date" in status(device)
    accepted = json.loads((device.stateroot_var / "lib/microshift-update" / ACCEPTED)
                          .read_text())
    assert accepted[SAMPLE_REF]["issued"] == newer
    for name, data in old.items():
        (out / name).write_bytes(data)
    refused(device, repo, pair, "a replayed index", offered="")


def test_once_a_device_had_an_index_a_missing_one_is_refused(
        pair: UpdatePair, tmp_path: Path) -> None:
    """A mirror that drops the index (404) would leave the device to the summary alone."""
    repo = site(pair, tmp_path)
    device = booted_device(pair, tmp_path, commit=pair.v2)
    run_updater(device, repo, UpdateOptions(config=SIM))
    shutil.rmtree(repo.parent / "updates")
    refused(device, repo, pair, "is gone, but this device accepted an index",
             offered="")
