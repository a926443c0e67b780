"""bootc images in a registry: pushed by digest and tag, signed, with their SBOM attached,
and the policy that makes a device accept only them.

- `push`: `skopeo copy --preserve-digests oci:LAYOUT:ARCH docker://REGISTRY/NS/NAME:TAG`;
  with a release key, `--sign-by` writes a GPG "simple signing" signature into a lookaside
  directory (containers-registries.d(5) `lookaside-staging`), published beside the site so
  devices fetch it (`lookaside`). Debian's skopeo has sigstore signing disabled; RHEL's has
  it (`--sign-by-sigstore-private-key`), which this does not use.
- `device_policy` / `device_registries`: a containers-policy.json(5) that rejects every
  image but the release's, signed by the release key (`signedBy`, whose identity rule
  refuses a signature of another repository), and the registries.d entry naming the
  lookaside.
- `attach_sbom`: the image's SPDX document as an OCI 1.1 artifact whose `subject` is the
  image, pushed under the referrers tag schema's fallback tag `sha256-HEX` (distribution
  2.8 has no referrers API).
- `LocalRegistry`: Debian's docker-registry (distribution 2.8) on 127.0.0.1 with a storage
  directory of its own, for the tests and for a build machine that has no registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError, MissingToolError
from builder.core.runner import Runner, find_tool
from builder.core.signing import SigningKey

SPDX = "application/spdx+json"
EMPTY = "application/vnd.oci.empty.v1+json"
POLICY_KEY = "/etc/pki/containers/microshift-release.gpg"


@dataclass(frozen=True)
class Pushed:
    reference: str      # REGISTRY/NS/NAME:TAG
    digest: str

    @property
    def by_digest(self) -> str:
        return self.reference.rsplit(":", 1)[0] + "@" + self.digest


def registries_d(root: Path, repository: str, *, staging: Path | None = None,
                 lookaside: str | None = None) -> Path:
    """A registries.d directory whose one file names where `repository`'s signatures are
    written (`lookaside-staging`) or read (`lookaside`)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "microshift.yaml").write_text(registries_yaml(repository, staging=staging,
                                                          lookaside=lookaside))
    return root


def registries_yaml(repository: str, *, staging: Path | None = None,
                    lookaside: str | None = None) -> str:
    """containers-registries.d(5)'s entry for `repository` (JSON is YAML)."""
    entry = {}
    if staging is not None:
        entry["lookaside-staging"] = staging.resolve().as_uri()
    if lookaside is not None:
        entry["lookaside"] = lookaside
    return json.dumps({"docker": {repository: entry}}) + "\n"


def push(runner: Runner, layout: Path, arch: str, reference: str, *,
         key: SigningKey | None = None, signatures: Path | None = None,
         tls_verify: bool = True) -> Pushed:
    """Copy the architecture's image of the layout to `reference`, digest unchanged."""
    if find_tool("skopeo") is None:
        raise MissingToolError("skopeo")
    digest_file = layout.parent / f".{layout.name}.{arch}.digest"
    argv = ["skopeo", "copy", "--preserve-digests", f"--dest-tls-verify={str(tls_verify).lower()}",
            "--digestfile", str(digest_file)]
    env = {}
    if key is not None:
        if signatures is None:
            raise BuildError("a signed push needs a lookaside directory for the signatures")
        repository = reference.rsplit(":", 1)[0]
        argv += ["--sign-by", key.key_id, "--registries.d",
                 str(registries_d(layout.parent / ".registries.d", repository,
                                  staging=signatures))]
        env["GNUPGHOME"] = str(key.homedir)
    argv += [f"oci:{layout}:{arch}", f"docker://{reference}"]
    proc = runner.run(argv, env=env, check=False)
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()
        raise BuildError(f"skopeo could not push {reference}: "
                         f"{reason[-1] if reason else 'no reason given'}",
                         hint="is the registry running and reachable (python -m builder "
                              "bootc --registry HOST:PORT/NS)?")
    digest = digest_file.read_text().strip()
    digest_file.unlink()
    return Pushed(reference, digest)


def device_policy(repository: str, key_path: str = POLICY_KEY) -> dict[str, Any]:
    """containers-policy.json: only `repository`'s images signed by the release key."""
    return {"default": [{"type": "reject"}],
            "transports": {"docker": {repository: [
                {"type": "signedBy", "keyType": "GPGKeys", "keyPath": key_path}]}}}


def pull(runner: Runner, reference: str, dest: Path, *, policy: Path | None = None,
         registries: Path | None = None, tls_verify: bool = True,
         arch: str | None = None) -> str:
    """Copy `reference` into an OCI layout at `dest` (under `policy` when given; of a
    multi-architecture image, the one for GOARCH `arch`); the image's digest. A refusal is a
    BuildError with skopeo's reason."""
    if find_tool("skopeo") is None:
        raise MissingToolError("skopeo")
    argv = ["skopeo", *(["--policy", str(policy)] if policy else []),
            *(["--override-arch", arch] if arch else []),
            *(["--registries.d", str(registries)] if registries else []), "copy",
            "--preserve-digests", "--remove-signatures",
            f"--src-tls-verify={str(tls_verify).lower()}",
            "--digestfile", str(dest.with_suffix(".digest")),
            f"docker://{reference}", f"oci:{dest}:pulled"]
    proc = runner.run(argv, check=False)
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()
        raise BuildError(f"{reference} refused: {reason[-1] if reason else 'no reason'}")
    return dest.with_suffix(".digest").read_text().strip()


def attach_sbom(registry: str, repository: str, subject: dict[str, Any], sbom: bytes, *,
                https: bool = True, timeout: float = 30.0) -> str:
    """Push the SBOM as an artifact referring to `subject` (an image manifest's
    descriptor); the tag it is found by (OCI 1.1 referrers tag schema)."""
    base = f"{'https' if https else 'http'}://{registry}/v2/{repository}"
    empty = b"{}"
    for blob in (empty, sbom):
        _upload(base, blob, timeout)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "artifactType": SPDX,
                "config": {"mediaType": EMPTY, "digest": _digest(empty), "size": len(empty)},
                "layers": [{"mediaType": SPDX, "digest": _digest(sbom), "size": len(sbom)}],
                "subject": subject}
    tag = "sha256-" + str(subject["digest"]).removeprefix("sha256:")
    body = json.dumps(manifest, sort_keys=True).encode()
    _request("PUT", f"{base}/manifests/{tag}", body, timeout,
             {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    return tag


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _upload(base: str, blob: bytes, timeout: float) -> None:
    location = _request("POST", f"{base}/blobs/uploads/", b"", timeout, {})
    separator = "&" if "?" in location else "?"
    url = urllib.parse.urljoin(base, location)
    _request("PUT", f"{url}{separator}digest={_digest(blob)}", blob, timeout,
             {"Content-Type": "application/octet-stream"})


def _request(method: str, url: str, body: bytes, timeout: float,
             headers: dict[str, str]) -> str:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return str(answer.headers.get("Location") or "")
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode(errors="replace").strip()
        raise BuildError(f"{method} {url}: HTTP {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BuildError(f"{method} {url}: {getattr(exc, 'reason', exc)}") from None


class LocalRegistry:
    """Debian's docker-registry on 127.0.0.1, storing into `storage`; stopped on exit."""

    def __init__(self, storage: Path, port: int = 0) -> None:
        self.storage = storage
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> LocalRegistry:
        program = find_tool("docker-registry") or find_tool("registry")
        if program is None:
            raise MissingToolError("docker-registry")
        self.storage.mkdir(parents=True, exist_ok=True)
        config = self.storage.parent / f"{self.storage.name}.config.yml"
        config.write_text(json.dumps({
            "version": 0.1, "log": {"level": "info"},
            "storage": {"filesystem": {"rootdirectory": str(self.storage.resolve())},
                        "delete": {"enabled": True}},
            "http": {"addr": self.address}}))
        # Its log goes to a file: a pipe nobody reads would stop it once full.
        self.log = self.storage.parent / f"{self.storage.name}.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([program, "serve", str(config)],
                                         stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                error = self.log.read_text(errors="replace").strip()[-300:]
                raise BuildError(f"docker-registry stopped at once: {error}")
            try:
                urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.__exit__()
        raise BuildError(f"docker-registry did not answer on {self.address} within 30 s")

    def uploads(self) -> int:
        """Blobs pushed to it so far (completed uploads, from its log): what a push cost."""
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        return sum(1 for line in text.splitlines() if "response completed" in line and
                   "http.request.method=PUT" in line and "/blobs/uploads/" in line)

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
