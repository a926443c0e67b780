"""Halt clicked in the console, on a fleet of simulated devices running the shipped
microshift-update (tests/rollout/fleet.py): one lab device has staged the release when the
admin opens every wave from the console and then halts; every other device of the fleet,
in whatever wave, then gets the signed metadata and not one byte of the update, and says
it is halted with the admin's reason. The page agrees with `rollout status --json` and
`rollout devices --json` before and after.

`nox -s tests` runs 4 devices; `nox -s fleet` 20. Integration tier: real ostree, GPG,
openssl, the collector process, headless chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.device.commits import SAMPLE_REF, UpdatePair
from tests.rollout import fleet
from tests.rollout.console_support import ADMIN, ConsolePage, token_file
from tests.rollout.fleet import (
    collector,
    fleet_size,
    make_fleet,
    published_site,
    start_rollout,
    status_text,
    update,
)
from tests.support import requires
from tests.support.browser import chromium, screenshot

pytestmark = [pytest.mark.integration, fleet.tier,
              requires.root_only("booting the simulated devices makes network namespaces"),
              pytest.mark.usefixtures("deletable_sysroots")]
REASON = "canary cameras lost their stream"


def test_a_halt_clicked_in_the_console_holds_every_device_that_had_not_staged(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    fleet = make_fleet(pair, tmp_path, fleet_size())
    rollout = start_rollout(pair, repo, fleet)
    first = next(member for member in fleet if member.wave == 0)
    others = [member for member in fleet if member is not first]
    db = tmp_path / "rollout.db"
    admin = token_file(tmp_path / "admin.token", ADMIN)
    with collector(repo, db, pair, "--admin-token-file", str(admin)) as url, \
            chromium() as driver:
        page = ConsolePage(driver, SAMPLE_REF)
        update(first, repo, url)
        assert first.reports[-1].target == pair.v2
        page.open(url.removesuffix("/verdicts"))
        page.wait_agrees(repo.parent, db, "the first device's verdicts")
        assert page.waves()[0]["staged"] == 1
        # Every wave open, so that only the halt stands between the update and the fleet.
        page.one('article input[name="force"]').click()
        for _ in rollout.waves[1:]:
            assert "advance done" in page.click("advance")
        page.one('article input[name="reason"]').send_keys(REASON)
        assert f"halted ({REASON})" in page.click("halt")
        for member in others:
            update(member, repo, url)
            assert f"is halted ({REASON})" in status_text(member), member.name
        page.wait_agrees(repo.parent, db, "the halted rollout")
        screenshot(driver, "console-fleet-halted")
    for member in others:
        # The signed metadata, and not one byte of the update.
        assert all(r.bytes_on_wire == r.metadata_bytes for r in member.reports), member.name
        assert not member.device.repo.has_commit(pair.v2), member.name
    assert first.device.repo.has_commit(pair.v2)
