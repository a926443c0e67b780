"""The MicroShift side of the components.d plugin calling convention (seed 003).

MicroShift scans /usr/lib/microshift/components.d/, runs each NNN-name/plugin in alphabetical
order with the MICROSHIFT_* environment and the plugin's directory as working directory, and
applies the manifests the plugins print. This module does the same against an image tree (an
extracted set of RPMs, a deployed ostree checkout) so images can be checked at build time:
`python -m builder components run --root ROOT`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from builder.components.config import (
    CONFIG_PATH,
    load_config,
    node_ip,
    node_name,
    plugin_environment,
)
from builder.core.errors import BuildError, InputError, ToolError
from builder.core.progress import Progress
from builder.core.runner import Runner

COMPONENTS_DIR = Path("usr/lib/microshift/components.d")
SUPPORTED_API_VERSIONS = ("v1",)
EXIT_MEANINGS = {1: "a system precondition is unmet", 2: "its configuration is wrong"}


class PluginError(BuildError):
    """A plugin failed; the loader exits with the plugin's exit code when it is 1 or 2."""

    def __init__(self, message: str, exit_code: int = 1, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Plugin:
    name: str         # NNN-name, the directory under components.d
    directory: Path

    @property
    def executable(self) -> Path:
        return self.directory / "plugin"


@dataclass(frozen=True)
class PluginOutput:
    plugin: str
    documents: tuple[dict[str, Any], ...]


def run_components(root: Path, *, config_path: Path | None, runner: Runner,
                   progress: Progress, timeout: float) -> list[PluginOutput]:
    """Do what MicroShift does at start: configuration -> environment -> every plugin."""
    if not root.is_dir():
        raise InputError(str(root), "", "the image root is not a directory")
    root = root.resolve()
    if config_path is not None and not config_path.is_file():
        raise InputError(str(config_path), "", "file not found")
    config = load_config(config_path or root / CONFIG_PATH)
    env = plugin_environment(config, node_ip=node_ip(config, runner),
                             node_name=node_name(config), sysroot=root)
    plugins = discover(root)
    if not plugins:
        progress.info(f"no component plugins in {root / COMPONENTS_DIR}")
    for plugin in plugins:
        check_api_version(runner, plugin, env, timeout)
    outputs = []
    for plugin in plugins:
        with progress.step(f"component plugin {plugin.name}"):
            outputs.append(run_plugin(runner, plugin, env, timeout, progress))
            progress.info(f"{len(outputs[-1].documents)} objects")
    check_unique(outputs)
    return outputs


def discover(root: Path) -> list[Plugin]:
    """Every plugin directory under ROOT's components.d, in alphabetical order."""
    base = root / COMPONENTS_DIR
    if not base.is_dir():
        # microshift-core owns the directory: without it ROOT is not a MicroShift image (a
        # wrong --root must not look like a successful run with no components).
        raise InputError(str(root), "", f"no /{COMPONENTS_DIR} here: not a MicroShift image "
                         "root", hint="point --root at a tree with microshift-core installed")
    plugins = []
    for entry in sorted(base.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or not entry.is_dir():
            continue  # MicroShift ignores hidden entries and stray files here too
        plugin = Plugin(entry.name, entry)
        if not plugin.executable.is_file():
            raise PluginError(f"component {entry.name}: {plugin.executable} is missing",
                              hint="every components.d/NNN-name directory needs a `plugin`")
        if not os.access(plugin.executable, os.X_OK):
            raise PluginError(f"component {entry.name}: {plugin.executable} is not executable")
        plugins.append(plugin)
    return plugins


def _invoke(runner: Runner, plugin: Plugin, command: str, env: Mapping[str, str],
            timeout: float) -> tuple[int, bytes, str]:
    """Run `plugin COMMAND`; returns (exit code, stdout, stderr). Timeouts are errors."""
    try:
        proc = runner.run([plugin.executable, command], cwd=plugin.directory, env=env,
                          timeout=timeout, check=False)
    except ToolError as exc:  # the runner reports a timeout as a ToolError with code -1
        raise PluginError(f"plugin {plugin.name} `{command}` did not finish within "
                          f"{timeout:g}s and was stopped",
                          hint="raise --timeout if the system is slow") from exc
    except OSError as exc:
        first = _first_line(plugin.executable)
        raise PluginError(f"plugin {plugin.name}: cannot execute {plugin.executable}: "
                          f"{exc.strerror} (its first line is {first!r})",
                          hint="is its interpreter installed?") from exc
    return proc.returncode, proc.stdout, proc.stderr.decode(errors="replace")


def _first_line(path: Path) -> str:
    with path.open("rb") as handle:
        return handle.readline(200).decode(errors="replace").rstrip()


def check_api_version(runner: Runner, plugin: Plugin, env: Mapping[str, str],
                      timeout: float) -> str:
    code, out, err = _invoke(runner, plugin, "api-version", env, timeout)
    version = out.decode(errors="replace").strip()
    if code != 0:
        raise PluginError(f"plugin {plugin.name} `api-version` exited with code {code}"
                          + _stderr_tail(err))
    if version not in SUPPORTED_API_VERSIONS:
        raise PluginError(f"plugin {plugin.name} speaks calling convention {version!r}; "
                          f"this loader supports {', '.join(SUPPORTED_API_VERSIONS)}",
                          hint="install a component package built for this MicroShift")
    return version


def run_plugin(runner: Runner, plugin: Plugin, env: Mapping[str, str], timeout: float,
               progress: Progress) -> PluginOutput:
    """`plugin run`: relay its stderr, map its exit code, parse its manifests."""
    code, out, err = _invoke(runner, plugin, "run", env, timeout)
    own_prefix = f"{plugin.name}: "
    for line in err.splitlines():
        # Plugins usually name themselves; say it once.
        progress.info(f"[{plugin.name}] {line.removeprefix(own_prefix)}")
    if code != 0:
        raise PluginError(f"plugin {plugin.name} failed with exit code {code}: "
                          f"{exit_meaning(code)}" + _stderr_tail(err),
                          exit_code=code if code in EXIT_MEANINGS else 1)
    return PluginOutput(plugin.name, parse_manifests(plugin.name, out))


def exit_meaning(code: int) -> str:
    if code in EXIT_MEANINGS:
        return EXIT_MEANINGS[code]
    if code < 0:
        return f"killed by signal {-code}"
    return f"unexpected exit code {code} (the convention allows 0, 1 and 2)"


def _stderr_tail(stderr: str, count: int = 8) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "".join(f"\n    {line}" for line in lines[-count:])


def parse_manifests(name: str, stream: bytes) -> tuple[dict[str, Any], ...]:
    """The Kubernetes objects of a plugin's stdout; anything else is the plugin's bug."""
    try:
        loaded = list(yaml.safe_load_all(stream.decode()))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PluginError(f"plugin {name} printed invalid YAML: {exc}") from exc
    documents = []
    for index, doc in enumerate(loaded):
        if doc is None:
            continue  # an empty document, e.g. from a leading `---`
        if not isinstance(doc, dict) or not all(
                isinstance(doc.get(key), str) for key in ("apiVersion", "kind")) \
                or not isinstance(doc.get("metadata"), dict) \
                or not isinstance(doc["metadata"].get("name"), str):
            raise PluginError(f"plugin {name} printed document {index + 1} that is not a "
                              "Kubernetes object (apiVersion, kind and metadata.name)")
        documents.append(doc)
    return tuple(documents)


def object_id(doc: Mapping[str, Any]) -> tuple[str, str, str, str]:
    group = str(doc["apiVersion"]).rpartition("/")[0]
    meta = doc["metadata"]
    return group, str(doc["kind"]), str(meta.get("namespace", "")), str(meta["name"])


def check_unique(outputs: list[PluginOutput]) -> None:
    """Two plugins printing the same object would silently overwrite each other."""
    owner: dict[tuple[str, str, str, str], str] = {}
    for output in outputs:
        for doc in output.documents:
            key = object_id(doc)
            if key in owner:
                group, kind, namespace, name = key
                where = f"{namespace}/{name}" if namespace else name
                raise PluginError(f"{kind} {where} ({group or 'core'}) is printed by both "
                                  f"{owner[key]} and {output.plugin}")
            owner[key] = output.plugin


class _Dumper(yaml.SafeDumper):
    """Block style, with multi-line strings (scripts, config files) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def render_stream(outputs: list[PluginOutput]) -> str:
    """One multi-document YAML stream, each object labelled with the plugin it came from."""
    return "".join(render_documents(output) for output in outputs)


def render_documents(output: PluginOutput) -> str:
    return "".join(
        f"---\n# Source: {output.plugin}\n"
        + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                    width=100)
        for doc in output.documents)


OUT_MARKER = ".microshift-components"


def write_kustomize_dir(path: Path, outputs: list[PluginOutput]) -> None:
    """DIR/kustomization.yaml listing DIR/NNN-name.yaml per plugin; replaced as a whole.

    Only a directory this command wrote (it holds OUT_MARKER) or an empty one is replaced:
    `--out ~/work` must never delete someone's files."""
    path = path.resolve()
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        resources = []
        for output in outputs:
            (staging / f"{output.plugin}.yaml").write_text(render_documents(output))
            resources.append(f"{output.plugin}.yaml")
        kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                         "kind": "Kustomization", "resources": resources}
        (staging / "kustomization.yaml").write_text(
            "# Built by `python -m builder components run`: one file per component plugin.\n"
            + yaml.safe_dump(kustomization, sort_keys=False))
        (staging / OUT_MARKER).write_text("written by `python -m builder components run`\n")
        staging.chmod(0o755)
        _swap_in(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_replaceable(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise BuildError(f"{path} exists and is not a directory",
                         hint="give --out a .yaml file name, or a directory path")
    if path.is_dir() and any(path.iterdir()) and not (path / OUT_MARKER).is_file():
        raise BuildError(f"--out {path}: the directory is not empty and was not written by "
                         "`components run`; refusing to replace it",
                         hint="name a new or empty directory, or a .yaml file")


def _swap_in(staging: Path, path: Path) -> None:
    if not path.exists():
        os.replace(staging, path)
        return
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(path, old)
    os.replace(staging, path)
    shutil.rmtree(old, ignore_errors=True)
