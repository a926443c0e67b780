"""One run of the updater on an image-mode (bootc) device (update.yaml `mode: image`).

The steps of an ostree run (builder/updater/run.py), with images for commits:
1. the booted image, from `bootc status --json`; the signed manifest it was made from (a
   layout this updater staged has a local digest: `image-digests.json` maps it back);
2. the container policy (/etc/containers/policy.json) must accept the image's reference;
   its signedBy keys verify the signed index and statement (rollout waves as always);
3. the delta from the booted image's manifest, downloaded resumably into the staging
   directory (builder/updater/delta_download.py), checked by size and sha256;
4. every layer it carries rebuilt from the booted deployment's files, each hashing to the
   signed config's diff_id (builder/updater/image_layers.py), within staging_max_bytes;
   or, when the index has no delta from the booted image, the signed manifest and the
   layers the device lacks pulled from the registry (builder/updater/image_pull.py);
5. `bootc switch --transport oci STAGING/image`, and `bootc status` must show it staged.
A refusal at any step leaves the device on its image with nothing staged.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.updater.delta_download import Limits
from builder.updater.image_index import ImageIndex, parse_image_index, policy_keys
from builder.updater.image_layers import rebuild_layers, write_layout
from builder.updater.image_pull import PULL_DIR, LayerPull, write_pulled_layout
from builder.updater.index import INDEX, DeltaFile, UpdateRefused, fetch_small
from builder.updater.outcome import Outcome
from builder.updater.run_state import (
    ROLLED_BACK,
    STAGED,
    STAGING,
    Held,
    _check_space,
    read_staged,
)
from builder.updater.state import read_json, write_atomic
from builder.updater.system import OSTREE_ARG, Booted

DIGESTS = "image-digests.json"   # local layout digest -> the signed manifest it was made from
MAX_MEMBERS = 10_000


class ImageRun:
    def __init__(self, run: Any) -> None:
        # The ostree run (builder/updater/run.py), whose steps this shares; not imported
        # here, as it dispatches to this class (imports flow one way).
        self.run = run
        self.system = run.system
        self.config = run.config

    def status(self) -> dict[str, Any]:
        proc = self.system.runner.run(["bootc", "status", "--json"], check=False)
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            raise BuildError(f"bootc status failed: {lines[-1] if lines else 'no output'}",
                             hint="mode: image needs a bootc (image-mode) device")
        try:
            status: dict[str, Any] = json.loads(proc.stdout)
        except ValueError as exc:
            raise BuildError(f"bootc status --json printed no JSON ({exc})") from None
        return status

    def signed(self, entry: Any) -> str | None:
        """The signed manifest digest of a status entry's image (None: no such entry)."""
        if not isinstance(entry, dict):
            return None
        digest = str(((entry.get("image") or {}).get("imageDigest")) or "")
        known = read_json(self.run._state_file(DIGESTS)) or {}
        return str(known.get(digest, digest)) or None

    def ids(self) -> tuple[str, str | None]:
        """The signed manifests' hex of the booted and the staged image, as greenboot's
        hooks compare them with the outcome's target (an ostree checksum never matches)."""
        status = self.status()
        pending = self.signed(status.get("status", {}).get("staged"))
        return self.booted(status).checksum, pending[len("sha256:"):] if pending else None

    def booted(self, status: dict[str, Any]) -> Booted:
        """The booted image as the run's Booted: `checksum` the signed manifest's hex."""
        digest = self.signed(status.get("status", {}).get("booted"))
        if digest is None:
            raise BuildError("bootc status shows no booted image: not an image-mode device")
        return Booted(digest[len("sha256:"):], "", "", self.config.image_ref, self.deployment())

    def deployment(self) -> Path:
        cmdline = (self.system.root / "proc/cmdline").read_text()
        match = OSTREE_ARG.search(cmdline)
        if match is None:
            raise BuildError("the kernel command line has no ostree= argument")
        return Path(self.system.sysroot / match.group(1).lstrip("/")).resolve()

    def execute(self) -> None:
        run = self.run
        status = self.status()
        booted = self.booted(status)
        if self.system.boot_failed_health_checks():
            run.log(f"greenboot found this boot of {booted.checksum[:12]} unhealthy: no "
                    "update is looked for until a boot is healthy")
            return
        pending = self.signed(status.get("status", {}).get("staged"))
        pending_hex = pending[len("sha256:"):] if pending else None
        self._note_rollback(booted, pending_hex)
        run.fleet.settle(booted.checksum, pending_hex)
        run._set("checking", f"image {self.config.image_ref}", booted=booted.checksum)
        run.log(f"booted image sha256:{booted.checksum[:12]} of {self.config.image_ref}")
        index = self._index(booted)
        if self._nothing_new(booted, index, pending_hex) or run._held(booted, index.manifest[7:]):
            return
        run.fleet.event("offered")
        self._update(booted, index, status)

    def _index(self, booted: Booted) -> ImageIndex:
        run = self.run
        base = run.updates_url("", booted.ref)
        fetched = fetch_small(base + INDEX, run.patience)
        if fetched is None:
            raise UpdateRefused(f"{base + INDEX} is missing: an image-mode device updates "
                                "only from a signed index")
        # The reference comes from the index, which is not trusted yet: only the policy's
        # keys for that reference may vouch for it.
        reference = parse_image_index(fetched.data, booted.ref, base + INDEX).reference
        keys = policy_keys(self.system.root, reference)
        if not keys:
            raise UpdateRefused(f"{reference}: the policy names no signedBy key, and an "
                                "unsigned index is never trusted")
        key = run._verified(fetched, base + INDEX + ".sig", keys,
                            "publish the index signed with the release key")
        run._check_fresh(base, fetched.data, booted.ref, keys)
        index = parse_image_index(fetched.data, booted.ref, base + INDEX)
        run.log(f"index {base + INDEX}: signed by {key[-16:]}, newest "
                f"{index.manifest[:19]} ({index.index.to_version or 'no version'}) of "
                f"{reference}, {len(index.deltas)} deltas")
        return index

    def _nothing_new(self, booted: Booted, index: ImageIndex, pending: str | None) -> bool:
        run, target = self.run, index.manifest[len("sha256:"):]
        if target == booted.checksum:
            run._set("idle", f"up to date: sha256:{target[:12]} is the newest image")
        elif target in run._rolled_back():
            run._set("idle", f"sha256:{target[:12]} was rolled back by greenboot on this "
                             "device; waiting for a newer image")
        elif pending == target:
            run._set("staged", f"sha256:{target[:12]} is already staged", target=target)
        else:
            return False
        run.log(run.status.detail)
        return True

    def _note_rollback(self, booted: Booted, pending: str | None) -> None:
        run = self.run
        staged = read_staged(run._state_file(STAGED))
        if staged is None or staged in (booted.checksum, pending):
            return
        known = run._rolled_back()
        if staged not in known:
            write_atomic(run._state_file(ROLLED_BACK), "".join(f"{c}\n" for c in
                                                                [*known, staged]))
        run._state_file(STAGED).unlink(missing_ok=True)
        run.log(f"sha256:{staged[:12]} was staged but the device runs "
                f"sha256:{booted.checksum[:12]}: greenboot rolled it back")

    def _update(self, booted: Booted, index: ImageIndex, status: dict[str, Any]) -> None:
        run = self.run
        staging = self.system.root / STAGING
        delta = index.delta_from("sha256:" + booted.checksum)
        try:
            if delta is None:
                local = self._pull(index, staging)
            else:
                local = self._fetch_delta(delta, index, booted, staging)
        except Held as held:
            run.fleet.held(held.reason)
            run._set("held", held.reason, target=index.index.to_commit)
            run.log(f"held: {held.reason}")
            return
        self._switch(staging / "image", local)
        write_atomic(run._state_file(STAGED), index.index.to_commit + "\n")
        shutil.rmtree(staging, ignore_errors=True)
        version = index.index.to_version or ""
        run._set("staged", target=index.index.to_commit, target_version=version)
        place = run.fleet.place
        if place is not None:
            run.fleet.staged(Outcome(booted.ref, place.rollout.id, place.wave,
                                     index.index.to_commit, version, booted.checksum,
                                     _version(status["status"]["booted"])))
        run.log(f"staged {index.manifest[:19]} ({run.method}); it boots at the next reboot")
        ostree_booted = status["status"]["booted"]["ostree"]["checksum"]
        run._maybe_reboot(Booted(ostree_booted, "", "", booted.ref, booted.deployment))

    def _fetch_delta(self, delta: DeltaFile, index: ImageIndex, booted: Booted,
                     staging: Path) -> str:
        """The delta file downloaded and its layers rebuilt: STAGING/image's local digest."""
        run = self.run
        if delta.size > self.config.staging_max_bytes:
            raise UpdateRefused(f"{delta.file} is {delta.size} bytes, over staging_max_bytes "
                                f"{self.config.staging_max_bytes}")
        _check_space(staging, delta.file, delta.size)
        run.method, run.delta = "image-delta", delta
        path = run._download(index.index, delta, "", booted)
        # As the ostree run: the collector hears of the download (its budget grants
        # slots to devices that downloaded), and a closed window or budget stops here.
        run._downloaded(run._closed("apply") or run.fleet.budget_hold())
        return self._apply(path, delta, index, booted, staging)

    def _pull(self, index: ImageIndex, staging: Path) -> str:
        """No delta from the booted image: the layers it lacks, from the registry."""
        run = self.run
        run.method = "image-layers"
        pull = LayerPull(run, index, staging)
        manifest, config, parts = pull.documents()
        layers = pull.missing(parts)
        size = sum(layer["size"] for layer in layers)
        run.log(f"no delta from the booted image in the index: {len(layers)} of {len(parts)} "
                f"layers ({size} bytes) from {pull.base}")
        if size > self.config.staging_max_bytes:
            raise UpdateRefused(f"the {len(layers)} layers the device lacks are {size} bytes, "
                                f"over staging_max_bytes {self.config.staging_max_bytes}")
        _check_space(staging, "layers", size)
        run._set("downloading", pull.base, target=index.index.to_commit, bytes_total=size,
                 target_version=index.index.to_version or "")
        limits = Limits(self.config.max_bytes_per_second, self.config.retries,
                        float(self.config.retry_delay_seconds), run.patience)
        downloads = pull.downloads(layers, limits)
        if not all(one.complete() for one in downloads):
            run._gate("download")
        started = time.monotonic()
        try:
            files = pull.fetch(downloads)
        finally:
            run.transfer, run.layer_bytes = pull.transfer, size
            run.download_seconds = round(time.monotonic() - started, 3)
        run.log(f"pulled {len(files)} layers, {pull.transfer.received} bytes in "
                f"{pull.transfer.requests} requests, {pull.transfer.interruptions} cuts "
                "resumed; each layer's size and digest match the signed manifest")
        run._downloaded(run._closed("apply") or run.fleet.budget_hold())
        write_pulled_layout(staging / "image", manifest, index.manifest, config, files)
        shutil.rmtree(staging / PULL_DIR, ignore_errors=True)
        return index.manifest

    def _apply(self, path: Path, delta: DeltaFile, index: ImageIndex, booted: Booted,
               staging: Path) -> str:
        """Unpack the delta file, rebuild its layers, write the layout; its local digest."""
        run = self.run
        run._set("applying", delta.file)
        layout = staging / "delta"
        unpack_delta(path, layout)
        path.unlink()   # its bytes are in the layout now: the disk holds them once
        budget = self.config.staging_max_bytes - delta.size
        rebuilt = rebuild_layers(layout, booted.deployment, staging / "layers", index.manifest,
                                 budget=budget)
        run.log(f"{delta.file}: {len(rebuilt.layers)} layers rebuilt, "
                f"{rebuilt.bytes_written} bytes, each the signed image's diff_id")
        shutil.rmtree(layout)
        local = write_layout(rebuilt, staging / "image", {})
        digests = read_json(run._state_file(DIGESTS)) or {}
        digests[local] = index.manifest
        write_atomic(run._state_file(DIGESTS), json.dumps(digests, sort_keys=True) + "\n")
        return local

    def _switch(self, layout: Path, local: str) -> None:
        proc = self.system.runner.run(["bootc", "switch", "--transport", "oci", str(layout)],
                                      check=False)
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            raise UpdateRefused(f"bootc switch failed: {lines[-1] if lines else 'no output'}",
                                hint="nothing was staged; the next run tries again")
        staged = (self.status().get("status", {}).get("staged") or {}).get("image") or {}
        if staged.get("imageDigest") != local:
            raise UpdateRefused(f"bootc status shows {staged.get('imageDigest')} staged, not "
                                f"the layout's {local[:19]}")


def _version(entry: Any) -> str:
    """A status entry's image version (the image's org.opencontainers.image.version)."""
    image = entry.get("image") if isinstance(entry, dict) else None
    version = image.get("version") if isinstance(image, dict) else None
    return version if isinstance(version, str) else ""


def unpack_delta(path: Path, dest: Path) -> None:
    """The delta file's layout: only `oci-layout`, `index.json` and `blobs/sha256/HEX`
    regular files; anything else (links, other paths) is refused."""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "blobs/sha256").mkdir(parents=True)
    try:
        with tarfile.open(path, "r:") as tar:
            for number, member in enumerate(tar):
                name = member.name
                blob = name.startswith("blobs/sha256/") and len(name) == 77 and \
                    all(c in "0123456789abcdef" for c in name[13:])
                if number >= MAX_MEMBERS or not member.isreg() or \
                        not (blob or name in ("oci-layout", "index.json")):
                    raise UpdateRefused(f"{path.name}: member {name[:200]!r} is not part of "
                                        "an OCI layout; allowed: oci-layout, index.json, "
                                        "blobs/sha256/HEX regular files")
                source = tar.extractfile(member)
                assert source is not None
                with source, (dest / name).open("wb") as out:
                    shutil.copyfileobj(source, out)
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise UpdateRefused(f"{path.name}: not a readable tar ({exc})") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
