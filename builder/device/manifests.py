"""What the simulated MicroShift applies at start: the kustomizations in its kustomize paths.

MicroShift 4.14 runs `kubectl apply -k` on every directory that `manifests.kustomizePaths`
(config.yaml; defaults in builder.components.config) names and that holds a kustomization
(pkg/kustomize/apply.go). The simulation does the same with the real `kubectl kustomize`
against the booted root, so the workloads the stand-in API reports are exactly those the
installed components' manifests define: when microshift-components.service fails, its
kustomization is absent and the components' workloads never appear.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import yaml

from builder.components.config import CONFIG_PATH, load_config
from builder.core.errors import BuildError
from builder.core.runner import Runner

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
WORKLOAD_KINDS = {"Deployment": "deployment", "DaemonSet": "daemonset",
                  "StatefulSet": "statefulset"}


def kustomization_dirs(root: Path) -> list[Path]:
    """The directories MicroShift would apply, in its order, resolved inside `root`."""
    config = load_config(root / CONFIG_PATH)
    found: list[Path] = []
    for pattern in config.effective_kustomize_paths:
        # Glob the directories, then follow links inside the root: an absolute link (core's
        # /usr/lib/microshift/manifests.d/000-microshift-components) points into the booted
        # root's /run, not this machine's.
        for match in sorted(glob.glob(str(root / pattern.lstrip("/")))):
            directory = _inside(root, Path(match))
            if any((directory / name).is_file() for name in KUSTOMIZATION_NAMES) \
                    and directory not in found:
                found.append(directory)
    return found


def _inside(root: Path, path: Path) -> Path:
    """Follow an absolute symlink as the booted system would: relative to its root."""
    if path.is_symlink():
        target = os.readlink(path)
        if os.path.isabs(target):
            return root / target.lstrip("/")
        return path.parent / target
    return path


def applied_workloads(root: Path, runner: Runner) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of every workload the kustomizations define."""
    workloads: set[tuple[str, str, str]] = set()
    for directory in kustomization_dirs(root):
        stream = runner.output(["kubectl", "kustomize", str(directory)])
        try:
            documents = [d for d in yaml.safe_load_all(stream) if isinstance(d, dict)]
        except yaml.YAMLError as exc:
            raise BuildError(f"kubectl kustomize {directory} printed invalid YAML: {exc}") \
                from exc
        for doc in documents:
            kind = WORKLOAD_KINDS.get(str(doc.get("kind")))
            meta = doc.get("metadata") or {}
            if kind and isinstance(meta, dict) and meta.get("name"):
                workloads.add((str(meta.get("namespace", "default")), kind, str(meta["name"])))
    return workloads
