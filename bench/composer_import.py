"""Publishing a service-built commit at real size: `python -m bench.composer_import`.

An Image Builder edge-commit tarball is made from a real directory tree (default: the
system's shared libraries, several hundred MB), then published into a fresh archive repo two
ways, side by side in each round:
  pull      what `composer fetch` did before issue 20: extract, `ostree pull-local` of the
            service's commit as it is (its distro version, no parent), summary;
  publish   what it does now (builder.imagebuilder.importer): extract, check, re-commit the
            tree as the release's commit (`ostree commit --tree=ref=`), `pull-local
            --untrusted` (every object's checksum verified: the tarball came from another
            machine), move the ref, summary.
Both are timed from the tarball on disk to the ref in the repo; medians are reported.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.imagebuilder.importer import Publish, import_commit_tarball

REF = "rhel/9/x86_64/edge"
TREES = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"))
PUBLISH = Publish(image="microshift-full", blueprint_version="4.14.2-1", version="4.14.2-1",
                  timestamp=1700000000, compose="0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")


def _ostree(*args: str | Path) -> str:
    return subprocess.run(["ostree", *map(str, args)], check=True, capture_output=True,
                          text=True).stdout.strip()


def service_tarball(work: Path, tree: Path) -> Path:
    """commit.tar as org.osbuild.ostree.commit + org.osbuild.tar lay it out."""
    top = work / "service"
    shutil.rmtree(top, ignore_errors=True)
    repo = top / "repo"
    repo.mkdir(parents=True)
    _ostree("init", "--mode=archive", f"--repo={repo}")
    commit = _ostree(f"--repo={repo}", "commit", f"--branch={REF}", f"--tree=dir={tree}",
                     "--add-metadata-string=version=9.6", "--add-metadata=ostree.bootable=true")
    (top / "compose.json").write_text(json.dumps({"ref": REF, "ostree-commit": commit}))
    tarball = work / "commit.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(top, arcname=".")
    return tarball


def old_pull(tarball: Path, repo: Path) -> None:
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        with tarfile.open(tarball) as tar:
            # Python 3.11.2 (Debian 12) has no extraction filters; this is our own tarball.
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter")
                                   else {}))
        _ostree("init", "--mode=archive", f"--repo={repo}")
        _ostree(f"--repo={repo}", "pull-local", f"{tmp}/repo", REF)
        _ostree(f"--repo={repo}", "summary", "-u")


def publish(tarball: Path, repo: Path) -> None:
    import_commit_tarball(tarball, repo, Runner(), Progress(stream=io.StringIO()), PUBLISH)


def measure(rounds: int, work: Path, tree: Path) -> dict[str, object]:
    tarball = service_tarball(work, tree)
    times: dict[str, list[float]] = {"pull": [], "publish": []}
    for _ in range(rounds):
        for name, step in (("pull", old_pull), ("publish", publish)):
            root = work / name
            shutil.rmtree(root, ignore_errors=True)
            (root / "ostree").mkdir(parents=True)
            started = time.monotonic()
            step(tarball, root / "ostree" / "repo")
            times[name].append(round(time.monotonic() - started, 2))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"tree": str(tree), "tarball_bytes": tarball.stat().st_size, "runs": times,
            "medians": medians, "ratio": round(medians["publish"] / medians["pull"], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.composer_import")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=next((t for t in TREES if t.is_dir()),
                                                           TREES[-1]))
    parser.add_argument("--out", type=Path, default=Path("build/bench/composer-import"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args.rounds, args.out.resolve(), args.tree)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
