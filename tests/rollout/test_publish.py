"""`publish --rollout-waves`: the new head's rollout is in the very statement that first names
it (no moment when a device could take the head outside the waves); publishing again keeps
a running rollout, and never undoes a halt; without a key, the published statement with its
rollout stays rather than the build's older one.

Integration tier: real ostree, rsync and GPG."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.cli import build_parser
from builder.commands.options import rollout_plan
from builder.context import Context
from builder.core.errors import InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.publish.rollout_statement import RolloutPlan, parse_waves
from builder.publish.upload import PublishOptions, publish
from builder.rollout.admin import Signer, Site, halt
from builder.updater.freshness import TIMESTAMP
from tests.rollout.fleet import release_key
from tests.support.cli import RELEASE, run_cli

pytestmark = pytest.mark.integration


def _build(pair: UpdatePair, root: Path) -> Path:
    """A build directory holding the pair: its repository and what `deltas` wrote."""
    shutil.copytree(pair.repo, root / "ostree/repo", symlinks=True)
    deltas = root / "deltas" / SAMPLE_REF
    shutil.copytree(pair.repo.parent / "updates" / SAMPLE_REF, deltas)
    (deltas / "report.json").write_text("{}")
    return root


def _rollout(target: Path) -> dict[str, object] | None:
    document = json.loads((target / "updates" / SAMPLE_REF / TIMESTAMP).read_text())
    rollout: dict[str, object] | None = document.get("rollout")
    return rollout


def test_publish_starts_the_rollout_with_the_head_and_keeps_it(pair: UpdatePair,
                                                               tmp_path: Path) -> None:
    build, target = _build(pair, tmp_path / "build"), tmp_path / "site"
    ctx = Context(build_dir=build, release_path=RELEASE, progress=Progress())
    key = release_key(pair)
    plan = RolloutPlan(parse_waves("site=lab,25%"), "canary")
    publish(ctx, PublishOptions(target=str(target), key=key, rollout=plan))
    started = _rollout(target)
    assert started is not None and started["id"] == "canary" and started["state"] == "active"
    assert started["commit"] == pair.v2
    waves: list[dict[str, object]] = started["waves"]  # type: ignore[assignment]
    assert [w["opened"] is not None for w in waves] == [True, False, False]
    # Publishing again (a fresh date for the statement) goes on with the same rollout.
    publish(ctx, PublishOptions(target=str(target), key=key,
                                rollout=RolloutPlan(parse_waves("50%"), "other")))
    assert _rollout(target) == started
    halt(Site(target), Signer(Runner(), key), SAMPLE_REF, "a report from the lab")
    publish(ctx, PublishOptions(target=str(target), key=key))
    halted = _rollout(target)
    assert halted is not None and halted["state"] == "halted"
    # Without a key, the build's statement (no rollout) does not replace the published one.
    publish(ctx, PublishOptions(target=str(target)))
    assert _rollout(target) == halted


def test_a_rollout_needs_the_signing_key_and_good_waves(tmp_path: Path) -> None:
    build = tmp_path / "build"
    for args, field in ((["--rollout-waves", "30%,10%"], "--rollout-waves"),
                        (["--rollout-waves", "10%", "--rollout-soak", "soon"], "--rollout-soak"),
                        (["--rollout-waves", "10%", "--rollout-id", "a b"], "--rollout-id")):
        with pytest.raises(InputError) as caught:
            rollout_plan(build_parser().parse_args(["publish", "--build-dir", str(build),
                                                    "--to", str(tmp_path), *args]))
        assert caught.value.field == field
    assert run_cli("publish", "--build-dir", build, "--to", tmp_path / "site",
                   "--rollout-waves", "10%") == 2   # no key in this build directory
