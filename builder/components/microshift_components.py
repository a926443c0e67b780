"""microshift-components: the components.d plugins, run on the device before MicroShift.

A real MicroShift binary does not run components.d plugins (seed 003's proposal); it applies
the kustomizations it finds in `manifests.kustomizePaths` (config.yaml; by default
/usr/lib/microshift/manifests{,.d/*} and /etc/microshift/manifests{,.d/*}, pkg/config/
manifests.go). `microshift-components.service` (oneshot, before microshift.service) bridges
the two with this command, shipped in microshift-core as /usr/bin/microshift-components, a zip
application of this very module and the loader (builder.core.zipapp):

- it runs the installed plugins with the loader's rules (api-version check, alphabetical
  order, MICROSHIFT_* environment from config.yaml, timeout, exit code meanings);
- on success it writes their output as one kustomization to RUN_DIR/manifests, which
  microshift-core's symlink /usr/lib/microshift/manifests.d/000-microshift-components names,
  so the binary's default kustomizePaths apply it. /run is empty at every boot: no manifest
  of an earlier deployment or an earlier run can ever be applied;
- on failure it removes that kustomization, writes the reason to RUN_DIR/failure.log and
  exits non-zero with the plugin's message on stderr (the journal): the unit fails and the
  greenboot health check reports the message.

It also refuses a config.yaml whose manifests.kustomizePaths would not read the components'
kustomization, since MicroShift would then start without them. Runs on Python 3.9 (RHEL 9).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from builder.components.config import CONFIG_PATH, MicroShiftConfig, load_config
from builder.components.loader import PluginError, run_components, write_kustomize_dir
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner

RUN_DIR = Path("run/microshift-components")
MANIFESTS = RUN_DIR / "manifests"
FAILURE_LOG = RUN_DIR / "failure.log"
# microshift-core's symlink to /MANIFESTS, inside a default kustomizePaths glob.
LINK = "/usr/lib/microshift/manifests.d/000-microshift-components"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="microshift-components",
        description="Run the components.d plugins and leave their manifests as a "
                    "kustomization that MicroShift applies at start.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser("run", help="run the plugins and write the kustomization")
    run.add_argument("--root", type=Path,
                     default=Path(os.environ.get("MICROSHIFT_ROOT") or "/"),
                     help="the system root (default: $MICROSHIFT_ROOT, else /)")
    run.add_argument("--timeout", type=float, default=120.0,
                     help="seconds each plugin may take (default: 120)")
    args = parser.parse_args(argv)
    return run_service(args.root, timeout=args.timeout)


def run_service(root: Path, *, timeout: float) -> int:
    progress = Progress(stream=sys.stderr)
    out, failure = root / MANIFESTS, root / FAILURE_LOG
    try:
        check_kustomize_paths(root)
        outputs = run_components(root, config_path=None, runner=Runner(), progress=progress,
                                 timeout=timeout)
        write_kustomize_dir(out, outputs)
    except BuildError as exc:
        shutil.rmtree(out, ignore_errors=True)
        message = str(exc)
        failure.parent.mkdir(parents=True, exist_ok=True)
        failure.write_text(message + "\n")
        sys.stderr.write(f"microshift-components: {message}\n")
        return _exit_code(exc)
    failure.unlink(missing_ok=True)
    count = sum(len(output.documents) for output in outputs)
    progress.info(f"{count} objects from {len(outputs)} component plugins in /{MANIFESTS}")
    return 0


def _exit_code(exc: BuildError) -> int:
    if isinstance(exc, PluginError):
        return exc.exit_code
    return 2 if isinstance(exc, InputError) else 1


def check_kustomize_paths(root: Path) -> MicroShiftConfig:
    """MicroShift must read the kustomization this command writes, or it starts without it."""
    path = root / CONFIG_PATH
    config = load_config(path)
    if config.kustomize_paths is not None and \
            not any(_glob_matches(pattern, LINK) for pattern in config.kustomize_paths):
        raise InputError(str(path), "manifests.kustomizePaths",
                         f"no entry reads {LINK}, where the components' manifests are; "
                         "MicroShift would start without its networking and storage",
                         hint="add /usr/lib/microshift/manifests.d/* to the list")
    return config


def _glob_matches(pattern: str, path: str) -> bool:
    """Go's filepath.Match: `*` and `?` never cross a `/`."""
    parts, names = pattern.rstrip("/").split("/"), path.split("/")
    return len(parts) == len(names) and all(
        fnmatch.fnmatchcase(name, part)
        # No strict=: Python 3.9 on the device has none; the lengths are equal here.
        for part, name in zip(parts, names))  # noqa: B905
