"""Content-addressed steps and the tool runner (fast unit tests)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from builder.core.errors import MissingToolError, ToolError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.steps import Step, materialize, replace_dir
from builder.rpm.packages import deterministic_tar


def quiet() -> Progress:
    return Progress(stream=io.StringIO())


def test_step_id_depends_on_inputs_and_parents_only() -> None:
    base = Step("rpm:x", {"spec": "a", "n": 1})
    assert base.id == Step("rpm:x", {"n": 1, "spec": "a"}).id  # key order is irrelevant
    assert base.id != Step("rpm:x", {"spec": "b", "n": 1}).id
    assert base.id != Step("rpm:x", {"spec": "a", "n": 1}, parents=("p",)).id
    assert base.id != Step("rpm:y", {"spec": "a", "n": 1}).id


def test_existing_step_is_not_rebuilt_and_says_so(tmp_path: Path) -> None:
    calls: list[Path] = []

    def produce(out: Path) -> None:
        calls.append(out)
        (out / "artifact").write_text("built")

    step = Step("demo", {"v": 1})
    first, built_first = materialize(step, tmp_path, produce, quiet())
    progress = quiet()
    second, built_second = materialize(step, tmp_path, produce, progress)
    assert (built_first, built_second) == (True, False)
    assert first == second and len(calls) == 1
    assert (second / "artifact").read_text() == "built"
    assert "unchanged" in progress.stream.getvalue()  # type: ignore[attr-defined]


def test_failed_step_leaves_nothing_behind(tmp_path: Path) -> None:
    def produce(out: Path) -> None:
        (out / "half").write_text("partial")
        raise RuntimeError("killed")

    step = Step("demo", {"v": 2})
    with pytest.raises(RuntimeError):
        materialize(step, tmp_path, produce, quiet())
    assert not step.output_dir(tmp_path).exists()
    assert list(step.output_dir(tmp_path).parent.iterdir()) == []


def test_replace_dir_keeps_the_old_content_when_filling_fails(tmp_path: Path) -> None:
    target = tmp_path / "rpms"
    replace_dir(target, lambda d: (d / "old.rpm").write_text("v1"))

    def broken(d: Path) -> None:
        (d / "new.rpm").write_text("v2")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        replace_dir(target, broken)
    assert [p.name for p in target.iterdir()] == ["old.rpm"]
    assert [p.name for p in tmp_path.iterdir()] == ["rpms"]


def test_deterministic_tar_depends_on_content_and_mode_not_mtime(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "usr/bin").mkdir(parents=True)
    script = tree / "usr/bin/tool"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    first = deterministic_tar(tree, "pkg-1", 1700000000)
    script.touch()
    assert deterministic_tar(tree, "pkg-1", 1700000000) == first
    script.chmod(0o644)
    assert deterministic_tar(tree, "pkg-1", 1700000000) != first


def test_runner_raises_typed_error_with_command_and_stderr() -> None:
    with pytest.raises(ToolError) as info:
        Runner().run(["sh", "-c", "echo boom >&2; exit 3"])
    assert info.value.returncode == 3
    assert info.value.argv[0] == "sh"
    assert "boom" in info.value.stderr and "boom" in str(info.value)


def test_runner_names_a_missing_tool() -> None:
    with pytest.raises(MissingToolError,
                       match="required host tool 'no-such-tool-xyz' is not installed"):
        Runner().run(["no-such-tool-xyz", "--version"])


def test_byte_code_caches_never_reach_a_package_tree(tmp_path: Path) -> None:
    from builder.core.paths import SOURCES_DIR
    from builder.core.templates import render_source_tree
    from builder.release.model import load_release
    from builder.release.template_context import component_context
    from tests.support.cli import RELEASE

    package = "microshift-networking-ovnk"
    sources = tmp_path / "sources"  # a copy: the test never writes into the repository
    shutil.copytree(SOURCES_DIR / package, sources / package)
    cache = sources / package / "usr/lib/microshift/components.d/005-networking-ovnk" \
        / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "plugin.cpython-311.pyc").write_bytes(b"\0")
    (sources / package / "stray.pyc").write_bytes(b"\0")
    out = tmp_path / "out"
    written = render_source_tree(
        package, component_context(load_release(RELEASE), "networking-ovnk"), out,
        sources=sources)
    assert Path("usr/lib/microshift/components.d/005-networking-ovnk/plugin") in written
    assert not any("__pycache__" in p.parts or p.suffix == ".pyc" for p in written)
    assert not list(out.rglob("*.pyc"))
