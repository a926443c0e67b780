"""The CLI's own arguments as users mistype them: names with path tricks, unicode, numbers
where words go and words where numbers go. Every run ends with exit status 0-3 and at most
an `error:` line (and a `hint:` line), no traceback, and nothing written outside the build
directory: an image name like `../../etc` cannot make a file anywhere else."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.cli import main
from tests.support.cli import RELEASE
from tests.support.mutations import TRICKS

VALUES = st.one_of(st.sampled_from(TRICKS), st.text(max_size=16).filter(lambda v: v.strip()),
                   st.integers(-5, 10**12).map(str), st.sampled_from(["-1", "0", "1e9", "5G"]))
COMMANDS = [
    ("blueprint", "--image"), ("kickstart", "--image"), ("installer", "--image"),
    ("kickstart", "--url"), ("kickstart", "--pull-secret"), ("kickstart", "--ssh-key"),
    ("deltas", "--jobs"), ("deltas", "--memory-limit"), ("sbom", "--image"),
    ("diff", None), ("apply-delta", None),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.fuzz
@given(command=st.sampled_from(COMMANDS), value=VALUES, arch=st.one_of(st.none(), VALUES))
def test_bad_arguments_end_in_one_error_line_and_write_nothing_elsewhere(
        command: tuple[str, str | None], value: str, arch: str | None) -> None:
    import contextlib
    import io

    work = Path(tempfile.mkdtemp(prefix="cli-"))
    build = work / "build"
    name, option = command
    argv = ["--release", str(RELEASE), *(["--arch", arch] if arch is not None else []),
            name, "--build-dir", str(build)]
    argv += [option, value] if option else [value, value]
    before = _tree(work)
    err = io.StringIO()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse: usage and one error line, status 2
                status = int(exc.code or 0)
    finally:
        os.chdir(cwd)
    lines = err.getvalue().splitlines()
    assert status in (0, 1, 2, 3), (status, lines)
    assert not any("Traceback" in line for line in lines), lines
    errors = [line for line in lines if line.startswith(("error:", "hint:"))
              or ": error: " in line]
    assert status == 0 or errors, lines
    assert all(p == "build" or p.startswith("build/") for p in _tree(work) - before), \
        _tree(work) - before
