"""Run a CI template's jobs here: the same commands, in the same order, read from the YAML.

What the CI service does around the commands is emulated only as far as the commands rely
on it: `${{ ... }}` expressions (GitHub) and variables (GitLab) get the values a test
gives, $GITHUB_ENV / $GITHUB_PATH written by one step reach the next, GitLab's script lines
run in one shell. Setup steps (installing host tools and the builder, which this machine
has) and `uses:` actions (checkout, cache, artifacts) are not run; `emulate_artifacts`
stands in for upload/download-artifact.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from builder.core.paths import PROJECT_ROOT

TEMPLATES = PROJECT_ROOT / "ci" / "templates"
GITHUB = TEMPLATES / "github-actions.yml"
GITLAB = TEMPLATES / "gitlab-ci.yml"
SETUP_STEPS = {"host-tools", "install"}  # GitHub step ids that install what this machine has
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def workspace(directory: Path) -> Path:
    """What a checkout gives the commands they read from the working directory."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PROJECT_ROOT / "release.yaml", directory / "release.yaml")
    return directory


def base_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The builder's virtualenv first on PATH, as the templates' install step arranges."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@dataclass
class Transcript:
    """What the steps ran and printed."""

    commands: list[str] = field(default_factory=list)
    output: str = ""


def substitute(text: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        expression = match.group(1)
        assert expression in values, f"the test gives no value for ${{{{ {expression} }}}}"
        return values[expression]

    return EXPRESSION.sub(one, text)


def github_steps(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The job's `run:` steps, in order, without the setup ones."""
    return [step for step in job["steps"] if "run" in step and step.get("id") not in SETUP_STEPS]


def run_github_job(workflow: Mapping[str, Any], name: str, values: Mapping[str, str],
                   cwd: Path, transcript: Transcript) -> None:
    job = workflow["jobs"][name]
    shell = workflow.get("defaults", {}).get("run", {}).get("shell")
    assert shell == "bash", "the templates' scripts use bash arrays"
    files = {key: cwd / f".github-{key.lower()}" for key in
             ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT")}
    for path in files.values():
        path.touch()
    env = base_env({**{k: substitute(str(v), values) for k, v in
                       {**workflow.get("env", {}), **job.get("env", {})}.items()},
                    **{k: str(v) for k, v in files.items()}})
    for step in github_steps(job):
        step_env = {**env, **{k: substitute(str(v), values)
                              for k, v in step.get("env", {}).items()}}
        _run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
              substitute(step["run"], values)], step_env, cwd, transcript, step.get("id", ""))
        env.update(_dotenv(files["GITHUB_ENV"]))
        for line in files["GITHUB_PATH"].read_text().splitlines():
            env["PATH"] = f"{line}{os.pathsep}{env['PATH']}"


def _dotenv(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def upload_paths(job: Mapping[str, Any]) -> list[str]:
    step = next(s for s in job["steps"] if str(s.get("uses", "")).startswith(
        "actions/upload-artifact"))
    return [line.strip() for line in step["with"]["path"].splitlines() if line.strip()]


def emulate_artifacts(job: Mapping[str, Any], cwd: Path, dest: Path) -> None:
    """upload-artifact keeps the paths below their common directory; download-artifact
    with a pattern puts each artifact in a directory of its own name."""
    paths = upload_paths(job)
    root = os.path.commonpath(paths)
    for path in paths:
        shutil.copytree(cwd / path, dest / os.path.relpath(path, root), symlinks=True)


def gitlab_matrix_job(pipeline: Mapping[str, Any], name: str) -> tuple[dict[str, Any],
                                                                         dict[str, str]]:
    """The job and the variables of its first matrix entry (first value of each list)."""
    job = pipeline[name]
    entry = job.get("parallel", {}).get("matrix", [{}])[0]
    return job, {k: str(v[0] if isinstance(v, list) else v) for k, v in entry.items()}


def run_gitlab_job(pipeline: Mapping[str, Any], name: str, variables: Mapping[str, str],
                   cwd: Path, transcript: Transcript) -> None:
    """The job's script in one bash, then its after_script (inherited from `extends`) in
    another, as the runner does."""
    job, matrix = gitlab_matrix_job(pipeline, name)
    parent = pipeline.get(job.get("extends", ""), {})
    env = base_env({**{k: str(v) for k, v in pipeline.get("variables", {}).items()},
                    **{k: str(v) for k, v in job.get("variables", {}).items()},
                    **matrix, **variables})
    try:
        _run(["bash", "-e", "-c", "\n".join(job["script"])], env, cwd, transcript, name)
    finally:
        after = job.get("after_script", parent.get("after_script"))
        if after:
            _run(["bash", "-c", "\n".join(after)], env, cwd, transcript, f"{name} after_script")


def _run(argv: list[str], env: Mapping[str, str], cwd: Path, transcript: Transcript,
         label: str) -> None:
    transcript.commands.append(argv[-1])
    proc = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)
    transcript.output += proc.stdout + proc.stderr
    assert proc.returncode == 0, f"step {label} failed ({proc.returncode}):\n{argv[-1]}\n" \
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
