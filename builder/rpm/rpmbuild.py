"""rpmbuild and createrepo_c, configured for byte-identical output."""

from __future__ import annotations

import os
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner

BUILD_HOST = "microshift-edge-builder"


def rpm_macros(source_date_epoch: int) -> dict[str, str]:
    """Macros that make rpmbuild reproducible; part of every RPM step's identity."""
    return {
        "_buildhost": BUILD_HOST,
        "clamp_mtime_to_source_date_epoch": "1",
        "use_source_date_epoch_as_buildtime": "1",
        "source_date_epoch_from_changelog": "0",
        "_binary_payload": "w19.zstdio",
        "_binary_filedigest_algorithm": "8",  # sha256
        "debug_package": "%{nil}",
        "_build_id_links": "none",
        "_rpmfilename": "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}.rpm",
        "_smp_mflags": "-j1",
        "_source_date_epoch": str(source_date_epoch),
    }


def build_spec(runner: Runner, spec: Path, topdir: Path, arch: str,
               source_date_epoch: int) -> list[Path]:
    """Build binary RPMs from `spec` in an isolated topdir; return them sorted."""
    for sub in ("BUILD", "BUILDROOT", "RPMS", "SOURCES", "SPECS", "SRPMS"):
        (topdir / sub).mkdir(parents=True, exist_ok=True)
    argv: list[str] = ["rpmbuild", "-bb", "--target", arch, "--define", f"_topdir {topdir}"]
    for name, value in rpm_macros(source_date_epoch).items():
        argv += ["--define", f"{name} {value}"]
    runner.run([*argv, str(spec)], env={"SOURCE_DATE_EPOCH": str(source_date_epoch),
                                        "LC_ALL": "C", "TZ": "UTC"})
    rpms = sorted((topdir / "RPMS").glob("*.rpm"))
    if not rpms:
        raise BuildError(f"rpmbuild produced no RPM from {spec}")
    for rpm in rpms:
        os.utime(rpm, (source_date_epoch, source_date_epoch))
    return rpms


def createrepo(runner: Runner, rpms: list[Path], dest: Path, source_date_epoch: int) -> None:
    """A yum repository of `rpms` in dest (Packages/ + repodata/), with stable metadata."""
    packages = dest / "Packages"
    packages.mkdir(parents=True, exist_ok=True)
    for rpm in rpms:
        target = packages / rpm.name
        target.hardlink_to(rpm)
        os.utime(target, (source_date_epoch, source_date_epoch))
    runner.run(["createrepo_c", "--quiet", "--no-database", "--revision", str(source_date_epoch),
                "--set-timestamp-to-revision", "--workers", "1", str(dest)],
               env={"SOURCE_DATE_EPOCH": str(source_date_epoch)})
