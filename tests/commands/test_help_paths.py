"""What the help texts and the docs say that a test can check: every file of the build
directory a `--help` names is one the build directory's layout (builder/core/build_layout.py)
makes, and every count of tests in the docs is a dated measurement, not a claim about now."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from builder.cli import build_parser
from builder.core.build_layout import Layout
from tests.support.cli import PROJECT_ROOT

MENTION = re.compile(r"\b(?:BUILD_)?DIR/[A-Za-z0-9_./{}*-]*[A-Za-z0-9_/}*-]")
FILE_NAME = re.compile(r"(?<![\w/.-])NAME[.-][A-Za-z0-9.-]*[A-Za-z0-9]")


def parsers(parser: argparse.ArgumentParser, name: str = "builder"
            ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from parsers(sub, f"{name} {command}")


def layout_paths() -> set[str]:
    """Every path the layout makes, rendered with the help texts' placeholders, and the
    directories above them."""
    layout = Layout(Path("DIR"))
    made = {layout.rpms, layout.specs, layout.yum_repo("ARCH"), layout.sample_base_rpms,
            layout.sample_base_repo("ARCH"), layout.bootable_base_repo, layout.build_repo,
            layout.compose_inputs("REF"), layout.ref_deltas("REF"), layout.disks / "NAME.ARCH.raw",
            layout.disks / "NAME.ARCH.qcow2", layout.disks / "NAME.ARCH.bios.raw",
            layout.disks / "NAME.ARCH.secureboot.raw", layout.disks / "NAME.ARCH.image.raw",
            layout.composer_record("NAME", "UUID"),
            layout.composer_commit("NAME", "UUID"), layout.sample_public_key,
            layout.public_key("ID"), layout.cache("delta-parts"), layout.device_work("SCENARIO"),
            layout.vm_work("SCENARIO"), layout.vm_accel, layout.lock("NAME", "ARCH"),
            layout.ostree_repo, layout.sample_gpg_home, layout.bootc_layout("NAME") / "index.json",
            layout.bootc_plan("NAME", "ARCH"), layout.bootc_report("NAME", "ARCH"),
            layout.bootc_delta("NAME", "ARCH"),
            layout.bootc_signatures, layout.bootc_device_files}
    for name in ("NAME", "NAME-ARCH"):
        made |= {layout.blueprint(name), layout.sbom(name), layout.installer(name),
                 layout.installer_record(name), layout.kickstart(name, "network"),
                 layout.kickstart(name, "embedded"), layout.kickstart(name, "container")}
    known = {str(path) for path in made}
    for path in made:
        known |= {str(parent) + "/" for parent in path.parents if parent != Path(".")}
        known.add(str(path.parent))
    return known


def help_texts() -> Iterator[tuple[str, str]]:
    for name, parser in parsers(build_parser()):
        # argparse wraps at hyphens and spaces: join what it split.
        text = re.sub(r"-\s*\n\s*", "-", parser.format_help())
        yield name, re.sub(r"\s+", " ", text)


def test_every_build_directory_path_a_help_names_is_one_the_layout_makes() -> None:
    known = layout_paths()
    names = {Path(path).name for path in known}
    wrong = []
    for command, text in help_texts():
        for mention in MENTION.findall(text):
            path = mention.replace("BUILD_DIR/", "DIR/")
            if path not in known:
                wrong.append(f"{command}: {mention}")
        for name in FILE_NAME.findall(text):
            if name not in names and not any(n.startswith(name) for n in names):
                wrong.append(f"{command}: {name}")
    assert wrong == []


def test_the_layout_check_would_see_a_wrong_name() -> None:
    """The blueprint's help once named NAME.lock.json; the lock is NAME.ARCH.lock.json."""
    names = {Path(path).name for path in layout_paths()}
    assert "NAME.lock.json" not in names and "NAME.ARCH.lock.json" in names
    assert "DIR/blueprints/NAME.lock.json" not in layout_paths()


def test_counts_of_tests_in_the_docs_are_dated_measurements() -> None:
    """A count of tests goes stale with the next test: the docs give one only as a
    measurement, with the date or commit it was taken at in the same paragraph."""
    undated = []
    for doc in [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]:
        for paragraph in re.split(r"\n\s*\n", doc.read_text()):
            counts = re.findall(r"\b\d[\d,]* (?:tests|passed)\b", paragraph)
            dated = re.search(r"\b20\d\d-\d\d-\d\d\b|\b[0-9a-f]{7,40}\b", paragraph)
            if counts and not dated:
                undated.append(f"{doc.name}: {counts[0]}")
    assert undated == []
