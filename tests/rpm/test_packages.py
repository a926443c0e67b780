"""Integration tier: real rpmbuild, createrepo_c, rpm and rpmlint on the sample release."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from builder.release.model import load_release
from tests.support import requires
from tests.support.cli import RELEASE, extract_rpm, rpm_query, run_cli
from tests.support.keys import make_release_key
from tests.support.ostree import ComposedPair, copy_build

pytestmark = pytest.mark.integration

COMPONENT_RPMS = ("core", "networking-ovnk", "networking-bridge", "storage-topolvm", "multus",
                  "greenboot", "update", "release-info", "selinux")


def arch_of(component: str) -> str:
    """Only core carries a binary; the others are built once, as noarch."""
    return "x86_64" if component == "core" else "noarch"


def digests(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def rpm_of(build_dir: Path, component: str) -> Path:
    [path] = (build_dir / "rpms").glob(f"microshift-{component}-4.14.2-1.*.rpm")
    return path


def rpm_install_test(root: Path, rpms: list[Path]) -> subprocess.CompletedProcess[str]:
    # Never --nodeps: it would skip the Conflicts check too.
    return subprocess.run(["rpm", "-i", "--test", "--root", str(root), *map(str, rpms)],
                          capture_output=True, text=True, check=False)


def test_rpms_and_repository_are_written(built_release: Path) -> None:
    names = sorted(p.name for p in (built_release / "rpms").glob("*.rpm"))
    assert names == sorted(rpm_of(built_release, c).name for c in COMPONENT_RPMS)
    # One architecture: its repository holds every package (its own and the noarch ones).
    assert (built_release / "repo" / "x86_64" / "repodata" / "repomd.xml").is_file()
    assert sorted(p.name for p in (built_release / "repo" / "x86_64" / "Packages")
                  .glob("*.rpm")) == names


def test_two_clean_builds_are_byte_identical(built_release: Path,
                                            sample_image_build: Path) -> None:
    # The other build ran in another process, another umask, time zone and locale, and
    # later (tests/conftest.py): none of that may reach the bytes.
    assert digests(sample_image_build / "rpms") == digests(built_release / "rpms")
    assert digests(sample_image_build / "repo") == digests(built_release / "repo")
    assert digests(sample_image_build / "sample-base" / "repo") == \
        digests(built_release / "sample-base" / "repo")


@pytest.mark.parametrize(("components", "conflict"), [
    (("core", "networking-ovnk", "storage-topolvm", "multus"), False),
    (("core", "networking-ovnk", "storage-topolvm"), False),
    (("core", "storage-topolvm"), False),
    (("core",), False),
    (("core", "networking-bridge"), False),
    (("core", "networking-ovnk", "networking-bridge"), True),
])
def test_component_sets_install_or_conflict(built_release: Path, rpm_root: Path,
                                            components: tuple[str, ...],
                                            conflict: bool) -> None:
    # microshift-core requires microshift-selinux: it is part of every set.
    base = sorted((built_release / "sample-base" / "rpms").glob("*.rpm"))
    base.append(rpm_of(built_release, "selinux"))
    proc = rpm_install_test(rpm_root, base + [rpm_of(built_release, c) for c in components])
    if conflict:
        assert proc.returncode != 0
        assert "microshift-networking-provider conflicts with microshift-networking-ovnk" \
            in proc.stderr
        assert "conflicts with microshift-networking-bridge" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


def test_multus_needs_a_networking_provider(built_release: Path, rpm_root: Path) -> None:
    base = sorted((built_release / "sample-base" / "rpms").glob("*.rpm"))
    proc = rpm_install_test(rpm_root, [*base, rpm_of(built_release, "core"),
                                       rpm_of(built_release, "selinux"),
                                       rpm_of(built_release, "multus")])
    assert proc.returncode != 0
    assert "microshift-networking-provider is needed by microshift-multus" in proc.stderr


def test_components_require_the_exact_core_release(built_release: Path) -> None:
    for component in set(COMPONENT_RPMS) - {"core", "selinux"}:
        requires = rpm_query("-qp", "--requires", rpm_of(built_release, component))
        assert "microshift-core = 4.14.2-1" in requires.splitlines()


def test_core_contents(built_release: Path, tmp_path: Path) -> None:
    core = rpm_of(built_release, "core")
    files = rpm_query("-qp", "--list", core).split()
    assert "/usr/bin/microshift" in files
    assert "/usr/lib/systemd/system/microshift.service" in files
    assert "/usr/lib/microshift/components.d" in files
    assert rpm_query("-qp", "--configfiles", core).split() == ["/etc/microshift/config.yaml"]
    config_flags = rpm_query("-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", core)
    assert "/etc/microshift/config.yaml cn" in config_flags  # config + noreplace
    for dep in ("cri-o", "cri-tools", "conntrack-tools", "iptables", "systemd"):
        assert dep in rpm_query("-qp", "--requires", core).split()
    assert "microshift-selinux = 4.14.2-1" in rpm_query("-qp", "--requires", core).splitlines()
    assert "systemctl --no-reload preset microshift.service" in \
        rpm_query("-qp", "--scripts", core)
    extracted = extract_rpm(core, tmp_path)
    out = subprocess.run([extracted / "usr/bin/microshift", "version"], capture_output=True,
                         text=True, check=True).stdout
    assert "MicroShift Version: 4.14.2" in out


def test_core_ships_every_payload_file_and_the_runtime_pieces(built_release: Path,
                                                              tmp_path: Path) -> None:
    core = rpm_of(built_release, "core")
    modes = dict(line.rsplit(" ", 1) for line in rpm_query(
        "-qp", "--qf", "[%{FILENAMES} %{FILEMODES:perms}\n]", core).splitlines())
    for binary in ("microshift", "microshift-etcd", "microshift-cleanup-data",
                   "microshift-sos-report", "microshift-components"):
        assert modes[f"/usr/bin/{binary}"] == "-rwxr-xr-x", binary
    assert modes["/usr/lib/microshift/manifests.d/000-microshift-components"].startswith("l")
    root = extract_rpm(core, tmp_path)
    etcd = subprocess.run([root / "usr/bin/microshift-etcd", "version"], capture_output=True,
                          text=True, check=True).stdout
    assert "MicroShift-etcd Version: 4.14.2-sample" in etcd
    release = load_release(RELEASE)
    [pause] = [img for img in release.images() if img.name == "pause"]
    dropin = tomllib.loads((root / "etc/crio/crio.conf.d/10-microshift.conf").read_text())
    assert dropin["crio"]["image"]["pause_image"] == pause.ref
    unit = (root / "usr/lib/systemd/system/microshift.service").read_text().splitlines()
    for line in ("Type=notify", "Delegate=yes", "LimitNOFILE=1048576", "TimeoutStartSec=2m",
                 "Before=kubepods.slice", "Requires=microshift-components.service",
                 "After=microshift-components.service"):
        assert line in unit, line
    assert "managed=0" in (root / "usr/lib/NetworkManager/conf.d/"
                                  "10-microshift-ignore-devices.conf").read_text()
    assert "fs.inotify.max_user_instances = 8192" in \
        (root / "usr/lib/sysctl.d/90-microshift-inotify.conf").read_text()
    requires = rpm_query("-qp", "--requires", core).split()
    assert "python3" in requires and "python3-pyyaml" in requires


def test_cni_drop_ins_name_the_directories_their_manifests_install_to(
        built_release: Path, tmp_path: Path) -> None:
    for key, name, first in (("networking-ovnk", "11-microshift-ovn.conf", "/usr/libexec/cni"),
                             ("networking-bridge", "11-microshift-bridge.conf",
                              "/usr/libexec/cni"),
                             ("multus", "12-microshift-multus.conf", "/run/cni/bin")):
        root = extract_rpm(rpm_of(built_release, key), tmp_path / key)
        network = tomllib.loads((root / "etc/crio/crio.conf.d" / name).read_text())
        dirs = network["crio"]["network"]["plugin_dirs"]
        assert dirs[0] == first and "/run/cni/bin" in dirs
        manifests = "".join(p.read_text() for p in root.rglob("*.yaml"))
        assert "/opt/cni/bin" not in manifests


def test_release_info_package_lists_every_image(built_release: Path, tmp_path: Path) -> None:
    root = extract_rpm(rpm_of(built_release, "release-info"), tmp_path)
    info = json.loads((root / "usr/share/microshift/release/release-x86_64.json").read_text())
    assert info["images"] == {img.name: img.ref for img in load_release(RELEASE).images()}


def test_greenboot_leaves_backup_to_a_binary_that_does_it(built_release: Path,
                                                           tmp_path: Path) -> None:
    sample = extract_rpm(rpm_of(built_release, "greenboot"), tmp_path / "sample")
    assert (sample / "usr/lib/systemd/system/microshift-data-restore.service").is_file()
    assert os.readlink(sample / "etc/systemd/user/grub-boot-success.timer") == "/dev/null"
    data = yaml.safe_load(RELEASE.read_text())
    data["components"]["core"]["data_backup"] = "microshift"
    release = tmp_path / "release.yaml"
    release.write_text(yaml.safe_dump(data))
    build = shutil.copytree(built_release, tmp_path / "build", symlinks=True)
    assert run_cli("--release", release, "rpms", "--build-dir", build, "--no-lint") == 0
    root = extract_rpm(rpm_of(build, "greenboot"), tmp_path / "binary")
    files = set(rpm_query("-qp", "--list", rpm_of(build, "greenboot")).split())
    assert "/usr/lib/systemd/system/microshift-data-restore.service" not in files
    assert "/usr/lib/greenboot/green.d/40-microshift-set-healthy.sh" not in files
    assert "/usr/lib/greenboot/red.d/40-microshift-pre-rollback.sh" in files
    assert os.readlink(root / "etc/systemd/user/grub-boot-success.timer") == "/dev/null"


def test_ovnk_host_side_matches_seed_001(built_release: Path, tmp_path: Path) -> None:
    root = extract_rpm(rpm_of(built_release, "networking-ovnk"), tmp_path)
    unit = (root / "usr/lib/systemd/system/microshift-ovs-init.service").read_text()
    assert "Type=oneshot" in unit and "Before=microshift.service" in unit
    assert "ExecStart=/usr/bin/configure-ovs-microshift.sh" in unit
    vswitchd = (root / "etc/systemd/system/ovs-vswitchd.service.d/"
                       "microshift-cpuaffinity.conf").read_text()
    assert "CPUAffinity=0" in vswitchd and "n-handler-threads=1" in vswitchd
    assert "n-revalidator-threads=1" in vswitchd
    assert "CPUAffinity=0" in (root / "etc/systemd/system/ovsdb-server.service.d/"
                                      "microshift-cpuaffinity.conf").read_text()
    assert '--no-mlockall' in (root / "usr/lib/microshift/ovs-options.env").read_text()
    assert "keyfile" in (root / "etc/NetworkManager/conf.d/microshift-nm.conf").read_text()
    ovn = yaml.safe_load((root / "etc/microshift/ovn.yaml").read_text()) or {}
    assert set(ovn) <= {"disableOVSInit", "mtu"}
    assert (root / "var/lib/ovnk").is_dir() and (root / "etc/ovnk").is_dir()
    assert "enable microshift-ovs-init.service" in \
        (root / "usr/lib/systemd/system-preset/85-microshift-networking-ovnk.preset").read_text()
    provides = rpm_query("-qp", "--provides", rpm_of(built_release, "networking-ovnk"))
    assert "microshift-networking-provider = 4.14.2-1" in provides.splitlines()


def test_ovs_init_honours_disable_ovs_init(built_release: Path, tmp_path: Path) -> None:
    root = extract_rpm(rpm_of(built_release, "networking-ovnk"), tmp_path)
    config = tmp_path / "ovn.yaml"
    config.write_text("disableOVSInit: true\nmtu: 1300\n")
    proc = subprocess.run(["bash", root / "usr/bin/configure-ovs-microshift.sh"],
                          env={"OVN_CONFIG": str(config), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert "disableOVSInit is true" in proc.stderr and "ovs-vsctl add-br br-ex" in proc.stderr


def test_rpmlint_reports_no_errors(built_release: Path, tmp_path: Path) -> None:
    from builder.rpm.lint import _rpmlint_command, rpmlintrc_text

    rc = tmp_path / "lintrc"
    rc.write_text(rpmlintrc_text(load_release(RELEASE)))
    proc = subprocess.run([_rpmlint_command(), "--rpmlintrc", str(rc),
                           *map(str, sorted((built_release / "rpms").glob("*.rpm")))],
                          capture_output=True, text=True, check=False)
    assert " 0 errors" in proc.stdout, proc.stdout[-3000:]
    assert proc.returncode == 0


def test_noop_rebuild_skips_every_package_and_payload_change_rebuilds_only_core(
        built_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_dir = copy_build(built_release, tmp_path / "b")
    capsys.readouterr()
    assert run_cli("--release", RELEASE, "rpms", "--build-dir", build_dir) == 0
    err = capsys.readouterr().err
    for component in COMPONENT_RPMS:
        assert f"rpm:microshift-{component}.{arch_of(component)}: unchanged" in err
    assert "rpmlint: unchanged" in err and "repo:x86_64: unchanged" in err
    assert "wrote" not in err

    payload = tmp_path / "microshift"
    payload.write_text("#!/bin/sh\necho 'MicroShift Version: 4.14.2-custom'\n")
    data = yaml.safe_load(RELEASE.read_text())
    data["components"]["core"]["payload"] = {"path": str(payload)}
    changed = tmp_path / "release.yaml"
    changed.write_text(yaml.safe_dump(data))
    assert run_cli("--release", changed, "rpms", "--build-dir", build_dir, "--no-lint") == 0
    err = capsys.readouterr().err
    assert "wrote microshift-core-" in err and err.count("wrote ") == 1
    for component in COMPONENT_RPMS[1:]:
        assert f"rpm:microshift-{component}.{arch_of(component)}: unchanged" in err


@requires.root_only("build-image composes, which runs rpm --root")
def test_build_image_with_a_release_key_signs_rpms_repo_commit_and_ships_the_key(
        tmp_path: Path, rpm_root: Path) -> None:
    homedir = tmp_path / "gnupg"
    fingerprint = make_release_key(homedir)
    build = tmp_path / "b"
    try:
        assert run_cli("--release", RELEASE, "build-image", "--build-dir", build,
                       "--gpg-homedir", homedir, "--gpg-key", fingerprint) == 0
    finally:
        subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"],
                       check=False)
    public_key = build / "keys" / f"{fingerprint}.asc"
    subprocess.run(["rpm", "--root", str(rpm_root), "--import", str(public_key)], check=True)
    for rpm in sorted((build / "rpms").glob("*.rpm")):
        check = subprocess.run(["rpm", "--root", str(rpm_root), "-K", str(rpm)],
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0 and "signatures OK" in check.stdout, check.stdout
    repodata = build / "repo" / "x86_64" / "repodata"
    verify = subprocess.run(["gpg", "--homedir", str(homedir), "--verify",
                             str(repodata / "repomd.xml.asc"), str(repodata / "repomd.xml")],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
    assert (build / "installer" / "microshift-full.iso").is_file()
    assert not (build / "gpg").exists()  # no SAMPLE key when the user gives one


def test_two_fresh_sample_builds_give_the_same_commit(
        sample_image_build: Path, composed_pair: ComposedPair) -> None:
    """build-image (one process, its own umask, time zone and locale) and the stages run one
    by one (sample-base, rpms, blueprint, compose) in other directories agree."""
    commit = subprocess.run(
        ["ostree", f"--repo={sample_image_build / 'ostree' / 'repo'}", "rev-parse",
         "microshift/x86_64/microshift-full"], check=True, capture_output=True,
        text=True).stdout.strip()
    assert commit == composed_pair.commit1
