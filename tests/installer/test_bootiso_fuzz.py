"""`--boot-iso` files that are not what they claim: random bytes, a truncated or damaged ISO,
an ISO whose file names carry quotes, spaces or newlines. Inspecting one ends in its listing or
in one BuildError naming the file, never in a traceback from reading xorriso's report."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.installer.bootiso import inspect_boot_iso

pytestmark = pytest.mark.integration
NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))


def _iso(names: list[str], volume_id: str = "RHEL-9-BOOT") -> bytes:
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch, "tree")
        (tree / "isolinux").mkdir(parents=True)
        (tree / "isolinux/isolinux.cfg").write_text("label linux\n  append quiet\n")
        (tree / "images").mkdir()
        (tree / "images/install.img").write_bytes(b"x" * 64)
        for index, name in enumerate(names):
            (tree / f"{index}{name}").write_text(name)
        out = Path(scratch, "out.iso")
        subprocess.run(["xorriso", "-outdev", str(out), "-volid", volume_id, "-map", str(tree),
                        "/"], check=True, capture_output=True)
        return out.read_bytes()


@pytest.fixture(scope="module")
def good_iso() -> bytes:
    return _iso([])


def _inspect(data: bytes) -> None:
    path = Path(tempfile.mkdtemp(prefix="boot-iso-")) / "boot.iso"
    path.write_bytes(data)
    try:
        inspect_boot_iso(Runner(), path)
    except BuildError as exc:
        assert str(exc).startswith(f"{path}: "), str(exc)


@pytest.mark.fuzz
@given(names=st.lists(NAMES, min_size=1, max_size=3))
def test_file_names_with_quotes_and_newlines_do_not_break_the_listing(names: list[str]) -> None:
    _inspect(_iso(names))


@pytest.mark.fuzz
@given(data=st.data())
def test_random_truncated_or_damaged_isos_are_one_error(good_iso: bytes,
                                                        data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(("random", "truncate", "damage")))
    if kind == "random":
        blob = data.draw(st.binary(max_size=4096))
    elif kind == "truncate":
        blob = good_iso[:data.draw(st.integers(0, len(good_iso) - 1))]
    else:
        at = data.draw(st.integers(0, len(good_iso) - 64))
        blob = good_iso[:at] + data.draw(st.binary(min_size=64, max_size=64)) + good_iso[at + 64:]
    _inspect(blob)
