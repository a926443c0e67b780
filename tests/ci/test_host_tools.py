"""ci/install-host-tools.sh installs every program and header the pipeline and its tests use,
and a second run on a machine that has them installs nothing.

A fresh machine has only what a minimal Debian or Fedora system has (BASE below); everything
else a test runs must be in ci/host-tools.txt, or CI passes only on machines that happened to
have it (zlib's headers were such a case).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "ci" / "host-tools.txt"
SCRIPT = ROOT / "ci" / "install-host-tools.sh"

# What a minimal system (Debian minbase, Fedora's container base) has, plus git and python3,
# which the README asks for, and the Python tools pip installs into the project's venv.
BASE = {"bash", "sh", "cp", "dd", "true", "mount", "umount", "fallocate", "python3", "git",
        "systemctl", "check-jsonschema",
        # Run by the updater on an image-mode device: RHEL's bootc there, the SAMPLE
        # stand-in (builder/device/standins/bootc) on the simulated device; not a host tool.
        "bootc"}
# Names tests run on purpose to see a missing tool reported.
ABSENT_ON_PURPOSE = re.compile(r"^(msb-)?no-such-tool")
# Headers of the C and C++ standard libraries (gcc and g++ bring them).
STANDARD_HEADERS = {"iostream", "cmath", "cstdio", "cstdlib", "string", "vector", "stdio.h",
                    "stdlib.h", "string.h", "unistd.h", "resolv.h", "math.h", "stdint.h",
                    "errno.h", "fcntl.h", "pthread.h", "dlfcn.h", "time.h"}
RUNNERS = {"run", "check_output", "check_call", "call", "Popen", "measured"}


def table() -> list[list[str]]:
    rows = [line.split() for line in TABLE.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return rows


def checks() -> set[str]:
    return {row[0] for row in table()}


def python_sources() -> list[Path]:
    return [p for top in ("builder", "tests", "bench", "ci") for p in (ROOT / top).rglob("*.py")]


def programs_run() -> dict[str, Path]:
    """The literal program of every `run([...])`-style call in the code and the tests."""
    found: dict[str, Path] = {}
    for path in python_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.List | ast.Tuple) and node.args[0].elts):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", None)
            first = node.args[0].elts[0]
            if name in RUNNERS and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                found.setdefault(first.value, path)
    return found


def test_every_row_names_a_check_and_a_package_for_both_distributions() -> None:
    for row in table():
        assert len(row) == 3, f"ci/host-tools.txt: {' '.join(row)}: want CHECK DEBIAN FEDORA"
        assert row[1:] != ["-", "-"], f"{row[0]}: packaged nowhere"


def test_every_program_the_code_and_tests_run_is_installed_by_the_script() -> None:
    known = checks() | BASE
    missing = {name: str(path.relative_to(ROOT)) for name, path in programs_run().items()
               if name not in known and not ABSENT_ON_PURPOSE.match(name)}
    assert missing == {}, "add them to ci/host-tools.txt"


def test_every_tool_a_test_requires_is_installed_by_the_script() -> None:
    required = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for call in re.finditer(r"need_tools\(([^)]*)\)", path.read_text()):
            required |= set(re.findall(r'"([^"]+)"', call.group(1)))
    assert required, "the scan found no need_tools() call"
    assert required - checks() == set()


def test_every_header_a_test_compiles_against_is_installed_by_the_script() -> None:
    headers = set()
    for path in python_sources():
        headers |= set(re.findall(r"#include <([\w./+-]+)>", path.read_text()))
    assert "zlib.h" in headers  # the C++ payload of tests/rpm/test_sample_base.py
    installed = {check.removeprefix("/usr/include/") for check in checks()
                 if check.startswith("/usr/include/")}
    assert headers - STANDARD_HEADERS - installed == set()


def test_a_second_run_installs_nothing_and_says_so(tmp_path: Path) -> None:
    """`.ci/run` and every nox session ran the script already: it must find everything now,
    with no package manager call (which would also `apt-get update` on every run)."""
    called = tmp_path / "called"
    for manager in ("apt-get", "dnf", "sudo"):
        fake = tmp_path / manager
        fake.write_text(f'#!/bin/sh\necho "{manager} $*" >> {called}\nexit 1\n')
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          check=False)
    assert not called.exists(), called.read_text()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "host tools: all present"


@pytest.mark.parametrize("manager", ["apt-get", "dnf"])
def test_only_packages_of_the_machine_s_own_manager_are_asked_for(tmp_path: Path,
                                                                  manager: str) -> None:
    """On Debian with dnf installed (the tests use it) a Fedora-only package such as
    python3.9 is never asked of apt-get; a check that fails names its package once."""
    fake_table = tmp_path / "ci" / "host-tools.txt"
    fake_table.parent.mkdir()
    fake_table.write_text("# CHECK DEBIAN FEDORA\n"
                          "python3.9 - python3.9\n"
                          "no-such-tool-a deb-a fedora-a\n"
                          "/no/such/file.h|/nor/this.h deb-h fedora-h\n"
                          "py:no_such_module deb-py fedora-py\n"
                          "bash deb-bash fedora-bash\n")
    script = fake_table.parent / "install-host-tools.sh"
    script.write_text(SCRIPT.read_text())
    # A PATH of the basic tools, the one package manager and a sudo that just runs it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sort", "id", "uname", "grep", "head", "tee", "cat", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    log = tmp_path / "log"
    (bin_dir / manager).write_text(f'#!/bin/bash\necho "$*" >> {log}\n')
    (bin_dir / "sudo").write_text('#!/bin/bash\nexec "$@"\n')
    for fake in (bin_dir / manager, bin_dir / "sudo"):
        fake.chmod(0o755)
    proc = subprocess.run([str(bin_dir / "bash"), str(script)], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, check=False)
    prefix = "deb" if manager == "apt-get" else "fedora"
    wanted = {f"{prefix}-a", f"{prefix}-h", f"{prefix}-py"} | \
        ({"python3.9"} if manager == "dnf" else set())
    installs = [line.split() for line in log.read_text().splitlines()
                if "install" in line.split()]
    assert len(installs) == 1, log.read_text()
    asked = {word for word in installs[0] if "-" in word or word == "python3.9"} - {"-y", "-q"}
    # qemu-user-static joins when this machine lacks the other architecture's handler.
    assert wanted <= asked <= wanted | {"qemu-user-static", "--no-install-recommends"}
    # The fake manager installed nothing: the script says so instead of looping next time.
    assert proc.returncode == 1
    assert "still missing after installing" in proc.stderr
