"""What the fake service's workers do: resolve containers and ostree refs, build the artifact.

Modelled on:
- osbuild-composer internal/weldr/api.go resolveContainers (a container-resolve job per
  compose; its error becomes a 500 ContainerResolveError) and cmd/osbuild-worker
  jobimpl-container-resolve.go (the resolver reads each `source` from its registry);
- osbuild/images pkg/ostree/ostree.go Resolve/resolveRef: a ref (not a checksum) is
  resolved by GET URL/refs/heads/REF; a failure is a ResolveRefError that api.go answers
  with 400 OSTreeOptionsError; a 64-hex parent is taken as is;
- pkg/distro/generic/images.go makeOSTreeParentCommit: with a URL and no parent, the
  parent is the image ref itself at that URL;
- osbuild/osbuild sources/org.osbuild.ostree: the workers fetch the parent commit from the
  URL (for org.osbuild.ostree.passwd); a commit the URL does not serve fails the build;
- osbuild/osbuild stages/org.osbuild.ostree.commit: `rpm-ostree compose commit` with the
  distro's `os_version` as `version`, the parent, ostree.bootable and rpmostree.inputhash
  metadata, and compose.json (ref, ostree-commit, ostree-version, ...); org.osbuild.tar
  packs the tree with repo/ and compose.json as commit.tar.

The commit is made with the real `ostree` tool. Like a real service's, two builds of one
blueprint differ: the rpm database records when packages were installed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.imagebuilder.fake_distro import Distro

CHECKSUM_LEN = 64


class ResolveError(Exception):
    pass


def resolve_containers(containers: list[dict[str, Any]], registry: dict[str, str]
                       ) -> list[dict[str, str]]:
    """Each [[containers]] source must be in the workers' reach (`registry`: source -> digest)."""
    resolved = []
    for container in containers:
        source = container.get("source", "")
        digest = registry.get(source)
        if digest is None:
            repo, _, wanted = source.partition("@")
            raise ResolveError(f"Error resolving container: reading manifest {wanted or 'latest'}"
                               f" in {repo}: manifest unknown")
        resolved.append({"source": source, "digest": digest,
                         "name": container.get("name") or source})
    return resolved


def _is_checksum(text: str) -> bool:
    return len(text) == CHECKSUM_LEN and all(c in "0123456789abcdef" for c in text)


def resolve_ref(url: str, ref: str) -> str:
    """pkg/ostree Resolve: a checksum as is, else URL/refs/heads/REF."""
    if _is_checksum(ref):
        return ref
    if url.startswith("mirrorlist="):
        raise ResolveError(f"error sending request to ostree repository {url!r}: "
                           "the fake has no network")
    target = url.rstrip("/") + "/refs/heads/" + ref
    try:
        with urllib.request.urlopen(target, timeout=5) as resp:
            body = resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        raise ResolveError(f"ostree repository {target!r} returned status: "
                           f"{exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ResolveError(f"error sending request to ostree repository {target!r}: "
                           f"{exc}") from exc
    try:
        bytes.fromhex(body)
    except ValueError as exc:
        raise ResolveError(f"ostree repository {target!r} returned invalid reference") from exc
    return body


def parent_fetch_problem(url: str, commit: str) -> str | None:
    """org.osbuild.ostree source: the commit object must be downloadable from the URL."""
    target = f"{url.rstrip('/')}/objects/{commit[:2]}/{commit[2:]}.commit"
    try:
        with urllib.request.urlopen(target, timeout=5):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"ostree pull of {commit} from {url} failed: {exc}"


@dataclass(frozen=True)
class BuildRequest:
    uuid: str
    distro: Distro
    blueprint: dict[str, Any]
    ref: str
    parent: str | None
    containers: tuple[dict[str, str], ...]


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _tree(root: Path, req: BuildRequest) -> None:
    """The image tree, in ostree layout (/etc stored as /usr/etc)."""
    distro, bp = req.distro, req.blueprint
    _write(root / "usr/lib/os-release",
           f'ID={distro.os_id}\nVERSION_ID="{distro.os_version}"\n'
           f'PRETTY_NAME="{distro.os_id} {distro.os_version} (fake osbuild-composer)"\n')
    for pkg in bp.get("packages", []):
        _write(root / "usr/share/fake-composer/packages" / pkg["name"],
               f"{pkg['name']}-{pkg.get('version') or 'latest'}\n")
    # Not reproducible on purpose, as rpm's database is not: install times differ per build.
    _write(root / "usr/share/rpm/rpmdb.sqlite", f"fake rpmdb of compose {req.uuid} built at "
           f"{time.time_ns()}\n")
    if req.containers:
        _write(root / "usr/share/containers/storage/fake-images.json",
               json.dumps(list(req.containers), indent=1, sort_keys=True) + "\n")
    custom = bp.get("customizations") or {}
    for entry in custom.get("files") or []:
        path = entry["path"]
        target = "usr/etc" + path[len("/etc"):] if path.startswith("/etc/") else path[1:]
        _write(root / target, entry.get("data", ""))
    enabled = (custom.get("services") or {}).get("enabled") or []
    if enabled:
        _write(root / "usr/lib/systemd/system-preset/40-fake-composer.preset",
               "".join(f"enable {unit}\n" for unit in enabled))


def build_commit_tarball(workdir: Path, req: BuildRequest) -> tuple[bytes, str]:
    """commit.tar for an ostree commit compose, and the commit's checksum."""
    top = workdir / f"commit-{req.uuid}"
    repo, tree = top / "repo", workdir / f"tree-{req.uuid}"
    repo.mkdir(parents=True)
    _tree(tree, req)
    _run("ostree", "init", "--mode=archive", f"--repo={repo}")
    inputhash = hashlib.sha256(json.dumps(req.blueprint, sort_keys=True).encode()).hexdigest()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    commit = _run("ostree", f"--repo={repo}", "commit", f"--branch={req.ref}",
                  f"--subject={req.blueprint['name']}", f"--timestamp={stamp}",
                  f"--parent={req.parent or 'none'}",
                  f"--add-metadata-string=version={req.distro.os_version}",
                  "--add-metadata=ostree.bootable=true",
                  f"--add-metadata-string=rpmostree.inputhash={inputhash}",
                  f"--tree=dir={tree}").strip()
    meta = {"ref": req.ref, "ostree-commit": commit, "ostree-version": req.distro.os_version,
            "ostree-timestamp": stamp, "rpm-ostree-inputhash": inputhash}
    (top / "compose.json").write_text(json.dumps(meta))
    tarball = workdir / f"{req.uuid}-commit.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(top, arcname=".")  # like org.osbuild.tar's `tar -C tree .`
    return tarball.read_bytes(), commit
