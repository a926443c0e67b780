"""A site with no link: the published updates/ on a USB stick (updates_url: file:///...).
The device gets the same rollout behaviour from the files on the stick (held while its wave
is closed, held while the rollout is halted, staged once its wave opens) without a byte from
the server, and its verdicts wait in its outbox for `rollout collect`.

Integration tier: a simulated device (real ostree, GPG, openssl) and the shipped updater."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.runner import Runner
from builder.device.commits import UpdatePair
from builder.rollout.admin import Signer, Site, advance, halt, open_wave, resume, status
from builder.rollout.store import Store
from builder.updater.verdicts import OUTBOX
from tests.rollout.fleet import (
    T0,
    make_fleet,
    published_site,
    release_key,
    start_rollout,
    status_text,
    update,
)
from tests.support import requires
from tests.support.cli import run_cli

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


def test_a_device_updating_from_a_usb_stick_follows_the_rollout(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    fleet = make_fleet(pair, tmp_path, 1, lab=0)   # one device, in the field
    start_rollout(pair, repo, fleet, every_wave=False)
    [member] = fleet
    stick = f"file://{repo.parent / 'updates'}/"
    signer, site = Signer(Runner(), release_key(pair)), Site(repo.parent)

    def update_from_stick() -> None:
        update(member, repo, "", {"updates_url": stick})

    update_from_stick()
    assert "not open yet (1 of 3 open)" in status_text(member)
    halt(site, signer, None, "a report from the lab")
    update_from_stick()
    assert "is halted (a report from the lab)" in status_text(member)
    resume(site, signer, None)
    store = Store(tmp_path / "rollout.db")
    while open_wave(site.statement(None)[2]) < member.wave:
        advance(site, store, signer, None, T0, force=True)
    update_from_stick()
    assert status_text(member).startswith("staged ")
    assert member.device.deployments()[0].checksum == pair.v2
    assert all(r.bytes_on_wire == 0 for r in member.reports)   # every byte from the stick
    outbox = member.device.stateroot_var / "lib/microshift-update" / OUTBOX
    assert len(list(outbox.glob("*.json"))) == 3   # offered, downloaded, staged
    assert run_cli("rollout", "collect", "--site", repo.parent, "--db",
                   tmp_path / "rollout.db", outbox) == 0
    wave = status(site, store, None, T0)["waves"][member.wave]
    assert (wave["offered"], wave["downloaded"], wave["staged"]) == (1, 1, 1)
    store.close()
