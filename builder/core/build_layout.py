"""The build directory's layout: every path in it, named once.

    rpms/  specs/  repo/ARCH/                 the RPMs, their specs, a yum repository per arch
    sample-base/{rpms,repo/ARCH}/             the SAMPLE base OS packages (offline demos, tests)
    baseos/repo/                              the SAMPLE bootable base commit (the VM tier)
    blueprints/NAME.toml, NAME.ARCH.lock.json the rendered blueprint and its depsolve
    ostree/repo/                              the release's commits, deltas and summary
    ostree/build-repo/, compose-inputs/       the compose's work repository, inputs by ref
    deltas/REF/                               the offline delta files, signed index, report
    sbom/NAME.spdx.json  kickstart/  installer/NAME.iso  disk/NAME.ARCH.raw
    bootc/NAME/, NAME.ARCH.plan.json, .json  the bootc image (an OCI layout), its layer plan
    composer/                                 what the Image Builder service returned
    gpg/ (the SAMPLE key)  keys/ID.asc (the release key's public half)
    cache/{payloads,repos,rpms,delta-parts}/  downloads and delta parts, kept across runs
    device-sim/SCENARIO/  vm/SCENARIO/        the device simulation and the VM tier
    .steps/  .published/  .lock.json          the step cache, publish markers, the run lock

Stages take their paths from here (`ctx.layout`), never by joining names of their own, so a
reader finds where anything lives in one place and a change of layout is one change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.core.signing import SAMPLE_PUBLIC_KEY


@dataclass(frozen=True)
class Layout:
    root: Path

    # --- packages -----------------------------------------------------------------------
    @property
    def rpms(self) -> Path:
        return self.root / "rpms"

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    @property
    def yum_repos(self) -> Path:
        return self.root / "repo"

    def yum_repo(self, arch: str) -> Path:
        return self.yum_repos / arch

    @property
    def sample_base(self) -> Path:
        return self.root / "sample-base"

    @property
    def sample_base_rpms(self) -> Path:
        return self.sample_base / "rpms"

    @property
    def sample_base_repos(self) -> Path:
        return self.sample_base / "repo"

    def sample_base_repo(self, arch: str) -> Path:
        return self.sample_base_repos / arch

    @property
    def bootable_base_repo(self) -> Path:
        return self.root / "baseos" / "repo"

    # --- images -------------------------------------------------------------------------
    @property
    def blueprints(self) -> Path:
        return self.root / "blueprints"

    def blueprint(self, image: str) -> Path:
        return self.blueprints / f"{image}.toml"

    def lock(self, image: str, arch: str) -> Path:
        return self.blueprints / f"{image}.{arch}.lock.json"

    @property
    def ostree(self) -> Path:
        return self.root / "ostree"

    @property
    def ostree_repo(self) -> Path:
        return self.ostree / "repo"

    @property
    def build_repo(self) -> Path:
        return self.ostree / "build-repo"

    def compose_inputs(self, ref: str) -> Path:
        return self.ostree / "compose-inputs" / f"{ref}.json"

    # --- what is published --------------------------------------------------------------
    @property
    def deltas(self) -> Path:
        return self.root / "deltas"

    def ref_deltas(self, ref: str) -> Path:
        return self.deltas / ref

    @property
    def sboms(self) -> Path:
        return self.root / "sbom"

    def sbom(self, name: str) -> Path:
        return self.sboms / f"{name}.spdx.json"

    def kickstart(self, name: str, variant: str) -> Path:
        return self.root / "kickstart" / f"{name}-{variant}.ks"

    def installer(self, name: str) -> Path:
        return self.root / "installer" / f"{name}.iso"

    def installer_record(self, name: str) -> Path:
        return self.root / "installer" / f"{name}.json"

    def bootc_layout(self, image: str) -> Path:
        return self.root / "bootc" / image

    def bootc_plan(self, image: str, arch: str) -> Path:
        return self.root / "bootc" / f"{image}.{arch}.plan.json"

    def bootc_report(self, image: str, arch: str) -> Path:
        return self.root / "bootc" / f"{image}.{arch}.json"

    def bootc_delta(self, image: str, arch: str) -> Path:
        """The update from the previous build's image, as an oci-delta layout."""
        return self.root / "bootc" / f"{image}.{arch}.delta"

    def bootc_containerfile(self, image: str) -> Path:
        return self.root / "bootc" / f"{image}.Containerfile"

    def bootc_bib_config(self, image: str) -> Path:
        return self.root / "bootc" / f"{image}.config.toml"

    @property
    def bootc_signatures(self) -> Path:
        return self.root / "bootc" / "signatures"

    @property
    def bootc_device_files(self) -> Path:
        return self.root / "bootc" / "device"

    @property
    def disks(self) -> Path:
        return self.root / "disk"

    def composer_record(self, image: str, uuid: str) -> Path:
        return self.root / "composer" / f"{image}-{uuid}.json"

    def composer_commit(self, image: str, uuid: str) -> Path:
        return self.root / "composer" / f"{image}-{uuid}-commit.tar"

    # --- keys ---------------------------------------------------------------------------
    @property
    def sample_gpg_home(self) -> Path:
        return self.root / "gpg"

    @property
    def sample_public_key(self) -> Path:
        return self.sample_gpg_home / SAMPLE_PUBLIC_KEY

    def public_key(self, key_id: str) -> Path:
        return self.root / "keys" / f"{key_id}.asc"

    # --- caches and work ----------------------------------------------------------------
    def cache(self, kind: str) -> Path:
        """Downloads and parts kept across runs: payloads, repos, rpms, delta-parts."""
        return self.root / "cache" / kind

    def device_work(self, scenario: str) -> Path:
        return self.root / "device-sim" / scenario

    def vm_work(self, scenario: str) -> Path:
        return self.root / "vm" / scenario

    @property
    def vm_accel(self) -> Path:
        return self.root / "vm" / "accel.json"

    @property
    def steps(self) -> Path:
        return self.root / ".steps"

    def published_marker(self, name: str) -> Path:
        return self.root / ".published" / name
