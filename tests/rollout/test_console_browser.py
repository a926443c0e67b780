"""The console in a real browser (headless chromium, tests/support/browser.py) on a running
collector that 20 devices report to: at every step the wave counts and the device table on
the page equal `rollout status --json` and `rollout devices --json`; advance (refused, then
forced) and halt are clicked, and the signed statement says what the page says; a device's
crafted failed-check text stays text; filters narrow the table; every control has a label;
on a phone-sized screen nothing overflows sideways.

Integration tier: chromium and chromedriver from the distribution, the collector as its own
process, real GPG and openssl."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.keys import Keys

from builder.rollout.admin import Site
from builder.updater.rollout_rules import Budget
from builder.updater.waves import wave_of
from tests.rollout.console_support import Api, ConsolePage, console
from tests.rollout.support import (
    REF,
    T0,
    DeviceIdentity,
    devices,
    make_site,
    statement_verifies,
)
from tests.support.browser import chromium, screenshot, wait_for
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration
CRAFTED = '<img src=x onerror="document.title=\'pwned\'">health: microshift not ready'
FAILED_LOG = "timed out after 300s waiting for: the API server\n" \
    "microshift.service: Main process exited, code=exited, status=1/FAILURE"
LAB = 6
LAB_LABELS = {"site": "lab"}


def _send(api: Api, device: DeviceIdentity, wave: int, events: list[str], *,
          labels: dict[str, str] | None = None, **fields: Any) -> None:
    """The device's verdicts; `fields` go into the last one."""
    for event in events:
        extra = dict(fields) if event == events[-1] else {}
        if wave or labels is not None:
            extra["labels"] = labels or {}
        code, _, answer = api.call("POST", "/verdicts", device.verdict(event, wave, **extra))
        assert code == 201, answer


def test_the_console_shows_and_steers_a_rollout_of_20_devices(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    site = make_site(tmp_path / "site", release_key[0])
    db = tmp_path / "rollout.db"
    fleet = devices(tmp_path / "devices", 20)
    rollout = site.statement(REF)[2]
    lab, rest = fleet[:LAB], fleet[LAB:]
    placed = {d.machine_id: wave_of(rollout, d.machine_id, {}) for d in rest}
    with console(site.root, db, release_key[0], tmp_path) as (_, api), chromium() as driver:
        page = ConsolePage(driver, REF)
        page.open(api.base)
        unlabelled = driver.execute_script(
            "return [...document.querySelectorAll('input, select')]"
            ".filter(e => !e.labels.length && !e.getAttribute('aria-label')).map(e => e.id)")
        assert unlabelled == []

        # Wave 1 (site=lab): three green, one rolled back (a crafted check), one staged,
        # one downloaded; 1 of 5 staged rolled back is the halt threshold (20%), not over.
        for device in lab[:3]:
            _send(api, device, 0, ["offered", "downloaded", "staged", "green"])
        _send(api, lab[4], 0, ["offered", "downloaded", "staged"])
        _send(api, lab[3], 0, ["offered", "downloaded", "staged", "rolled-back"],
              failed_check=CRAFTED, boots=3, failed_log=FAILED_LOG)
        _send(api, lab[5], 0, ["offered", "downloaded"])
        page.wait_agrees(site.root, db, "the counts of wave 1")
        assert page.waves()[0] == {"offered": 6, "downloaded": 6, "staged": 5,
                                          "green": 3, "rolled_back": 1, "silent": 2}
        bar = page.one('tr[data-wave="1"] .bar')
        assert bar.get_attribute("aria-label") == "wave 1: 6 offered, 6 downloaded, " \
            "5 staged, 3 green, 1 rolled back"
        widths = driver.execute_script(
            "return [...arguments[0].children].map(e => [e.className, e.style.width])", bar)
        assert widths == [["part part-green", "50%"], ["part part-rolled-back", "16.6667%"],
                          ["part part-staged", "16.6667%"],
                          ["part part-downloaded", "16.6667%"]], widths
        row = f'tr[data-machine-id="{lab[3].machine_id}"]'
        assert page.text(f"{row} summary") == CRAFTED          # the log folded under it
        page.one(f"{row} summary").click()
        assert page.text(f'{row} [data-field="failed-log"]') == FAILED_LOG
        time.sleep(2.5)   # a re-render keeps what the admin unfolded
        assert driver.execute_script(f"return document.querySelector('{row} details').open")
        assert driver.title == "Fleet console" and not page.all("#devices img")
        screenshot(driver, "console-wave-1")

        # Advance: wave 1 opened at the tests' T0 and has not soaked: refused, as the
        # command refuses; forced, wave 2 opens.
        assert "advance refused: wave 1 (site=lab) has soaked" in page.click("advance")
        page.one('article input[name="force"]').click()
        assert "advance done" in page.click("advance")
        for device in rest:
            if placed[device.machine_id] == 1:
                _send(api, device, 1, ["offered", "downloaded"])
        page.wait_agrees(site.root, db, "the counts of wave 2")
        assert page.waves()[1]["offered"] == sum(w == 1 for w in placed.values())

        # Halt, with a reason, from the keyboard (type, Tab to the button, Enter): the
        # statement is signed halted, the page says so.
        driver.execute_script("document.getElementById('message').textContent = ''")
        page.one('article input[name="reason"]').send_keys("line 3 cameras dropped",
                                                           Keys.TAB)
        assert driver.switch_to.active_element.get_attribute("data-action") == "halt"
        driver.switch_to.active_element.send_keys(Keys.ENTER)
        assert "halt done" in wait_for(driver, lambda: page.text("#message").startswith(
            "halt done") and page.text("#message"), "the halt's answer")
        statement = Site(site.root).statement(REF)[2]
        assert (statement.state, statement.reason) == ("halted", "line 3 cameras dropped")
        assert statement_verifies(site, release_key[1])
        page.wait_agrees(site.root, db, "the halted state")
        assert "line 3 cameras dropped" in page.one('[data-field="reason"]').text
        assert page.one('button[data-action="resume"]').is_enabled()
        assert not page.one('button[data-action="halt"]').is_enabled()
        actions = [a.get_attribute("data-action") for a in page.all("#actions li")]
        assert actions == ["halt", "advance", "advance"]
        screenshot(driver, "console-halted")

        # Filters: one device by its id, the rolled-back one by its state.
        page.one("#filter-text").send_keys(lab[1].machine_id)
        wait_for(driver, lambda: len(page.all("#devices tbody tr")) == 1, "one device")
        page.one("#filter-text").clear()
        page.one('#filter-state option[value="rolled-back"]').click()
        wait_for(driver, lambda: [r.get_attribute("data-machine-id") for r in
                                  page.all("#devices tbody tr")] == [lab[3].machine_id],
                 "the rolled-back device alone")

        driver.set_window_size(390, 844)
        screenshot(driver, "console-phone")
        overflow = driver.execute_script(
            "const d = document.documentElement; return d.scrollWidth - d.clientWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a phone's screen"


def test_a_budget_and_a_stalled_one_are_on_the_page_with_the_held_devices(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    """Budget of 1 per site: with the release key one lab device updates and one waits;
    started without the key, the collector cannot grant and the page says the budget is
    stalled and why (flightctl's budgets stalled silently: PR #892)."""
    site = make_site(tmp_path / "site", release_key[0], "100%", budget=Budget("site", 1))
    db = tmp_path / "rollout.db"
    first, second, third = devices(tmp_path / "devices", 3)
    held = {"reason": "disruption budget of site=lab full (1 of 1 updating)", "since": T0}
    with chromium() as driver:
        page = ConsolePage(driver, REF)
        with console(site.root, db, release_key[0], tmp_path) as (_, api):
            _send(api, first, 0, ["offered", "downloaded"], labels=LAB_LABELS)
            _send(api, second, 0, ["offered", "downloaded"], labels=LAB_LABELS, held=held)
            page.open(api.base)
            group = wait_for(driver, lambda: page.text('.budget li[data-group="lab"]'),
                             "the budget's lab group")
            assert group == "site=lab: 1 of 1 updating, 1 waiting", group
            assert "disruption budget of site=lab full" in \
                page.text(f'.held li[data-machine-id="{second.machine_id}"]')
            assert "disruption budget" in page.text(
                f'tr[data-machine-id="{second.machine_id}"] td[data-field="held"]')
        with console(site.root, db, None, tmp_path) as (_, api):
            _send(api, third, 0, ["offered", "downloaded"], labels={"site": "line-2"})
            page.open(api.base)
            stalled = wait_for(driver, lambda: page.text(
                '.budget li.stalled[data-group="line-2"]'), "the stalled group")
            assert "stalled: 1 waiting with 1 free slots: no release key" in stalled, stalled
            screenshot(driver, "console-budget-stalled")
