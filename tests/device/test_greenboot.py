"""microshift-greenboot: the shipped scripts, the timeout formula, the health lists, grubenv.

The shell tests run the real scripts from specs/sources/microshift-greenboot with bash against
a scratch root (MICROSHIFT_ROOT) and the stand-in API; those that need curl, jq, shellcheck or
rpmbuild are integration tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from builder.core.errors import InputError
from builder.core.paths import SOURCES_DIR
from builder.core.templates import render_source_tree
from builder.device.boot import STANDINS
from builder.device.grubenv import Grubenv, grub_select, mark_success, set_upgrade_counter
from builder.device.health_server import ApiServer, Health, parse_health
from builder.release.model import load_release
from builder.release.template_context import component_context
from tests.support import requires
from tests.support.cli import RELEASE

GREENBOOT = SOURCES_DIR / "microshift-greenboot"
FUNCTIONS = GREENBOOT / "usr/share/microshift/functions/greenboot.sh"
CHECK = "usr/lib/greenboot/check/required.d/40-microshift-running-check.sh"
OVNK_LIST = "usr/lib/microshift/components.d/005-networking-ovnk/healthcheck.list"


def shell_scripts() -> list[Path]:
    """Every shell script microshift-greenboot ships (by shebang or shellcheck directive)."""
    found = []
    for path in sorted(GREENBOOT.rglob("*")):
        if path.is_file():
            head = path.read_text(errors="replace").split("\n", 1)[0]
            if head.startswith("#!/bin/bash") or "shellcheck shell=" in head:
                found.append(path)
    return found


def make_root(tmp: Path, *, base: str = "300", max_boots: str = "3",
              counter: int | None = None, enabled: bool = True, active: bool = True,
              state: str | None = None) -> Path:
    """A booted root: the greenboot package, core + OVN-K health lists, unit states, grubenv."""
    root = tmp / "root"
    render_source_tree("microshift-greenboot", {}, root)
    ovnk = root / OVNK_LIST
    ovnk.parent.mkdir(parents=True)
    shutil.copyfile(SOURCES_DIR / "microshift-networking-ovnk" / OVNK_LIST, ovnk)
    conf = root / "etc/greenboot/greenboot.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"GREENBOOT_MAX_BOOT_ATTEMPTS={max_boots}\nMICROSHIFT_WAIT_TIMEOUT_SEC={base}\n")
    env = Grubenv(root / "boot/grub2/grubenv")
    env.write({"boot_success": "0"} | ({"boot_counter": str(counter)} if counter is not None
                                        else {}))
    units = root / "run/device-sim/units"
    units.mkdir(parents=True)
    (units / "microshift.service.is-enabled").write_text("enabled" if enabled else "disabled")
    (units / "microshift.service.is-active").write_text(
        state or ("active" if active else "failed"))
    return root


def script_env(tmp: Path, root: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name, text in STANDINS.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    return {"MICROSHIFT_ROOT": str(root), "PATH": f"{bindir}:/usr/bin:/bin", "LC_ALL": "C"}


def run_bash(env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def write_kubeconfig(root: Path, url: str) -> None:
    kubeconfig = root / "var/lib/microshift/resources/kubeadmin/kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text(f"apiVersion: v1\nclusters:\n- cluster:\n    server: {url}\n"
                          "  name: microshift\n")


# --- the timeout formula ---------------------------------------------------------------

@pytest.mark.parametrize(("base", "max_boots", "counter", "expected"), [
    ("300", "3", None, 300),   # not an upgrade boot: one base
    ("300", "3", 2, 300),      # first attempt of an upgrade (grub decremented 3 -> 2)
    ("300", "3", 1, 600),      # second attempt: twice the time
    ("300", "3", 0, 900),      # last attempt
    ("60", "5", 0, 300),
    ("abc", "3", 0, 900),      # unparsable base: the default 300
    ("300", "12", 0, 900),     # max out of 1..9: the default 3
    ("300", "3", 7, 300),      # counter above max: never below one base
    ("300", "3", 3, 300),      # counter at max (no attempt counted yet): one base, never 0
    ("0", "3", 0, 900),        # a base of 0 s: the default 300
    ("10000", "3", 0, 900),    # a base over 9999 s: the default 300
])
def test_wait_timeout_grows_with_each_boot_attempt(tmp_path: Path, base: str, max_boots: str,
                                                   counter: int | None, expected: int) -> None:
    root = make_root(tmp_path, base=base, max_boots=max_boots, counter=counter)
    proc = run_bash(script_env(tmp_path, root),
                    f'source "{root}/usr/share/microshift/functions/greenboot.sh"; '
                    "wait_timeout_seconds")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(expected)


def test_bad_greenboot_conf_values_are_named_on_stderr(tmp_path: Path) -> None:
    root = make_root(tmp_path, base="5m")
    proc = run_bash(script_env(tmp_path, root),
                    f'source "{FUNCTIONS}"; wait_timeout_seconds')
    assert "MICROSHIFT_WAIT_TIMEOUT_SEC='5m'" in proc.stderr
    assert "[1..9999]" in proc.stderr


# --- health lists ----------------------------------------------------------------------

def test_health_workloads_reads_core_then_components(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    proc = run_bash(script_env(tmp_path, root), f'source "{FUNCTIONS}"; health_workloads')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "openshift-service-ca deployment service-ca",
        "openshift-ingress deployment router-default",
        "openshift-dns daemonset dns-default",
        "openshift-dns daemonset node-resolver",
        "openshift-ovn-kubernetes daemonset ovnkube-master",
        "openshift-ovn-kubernetes daemonset ovnkube-node",
    ]


def test_a_malformed_health_list_names_file_and_line(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / OVNK_LIST).write_text("# ok\nopenshift-ovn-kubernetes pod ovnkube-node\n")
    proc = run_bash(script_env(tmp_path, root), f'source "{FUNCTIONS}"; health_workloads')
    assert proc.returncode != 0
    assert f"/{OVNK_LIST}:2: expected 'namespace kind name'" in proc.stderr


def manifest_workloads(package: str, key: str, plugin: str,
                       dest: Path) -> set[tuple[str, str, str]]:
    """Deployments, daemonsets and statefulsets the component's rendered manifests create."""
    render_source_tree(package, component_context(load_release(RELEASE), key), dest)
    found = set()
    for manifest in (dest / "usr/lib/microshift/components.d" / plugin).glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            if doc and doc.get("kind") in ("Deployment", "DaemonSet", "StatefulSet"):
                meta = doc["metadata"]
                found.add((meta["namespace"], doc["kind"].lower(), meta["name"]))
    return found


@pytest.mark.parametrize("list_path", sorted(SOURCES_DIR.glob(
    "*/usr/lib/microshift/components.d/*/healthcheck.list")), ids=lambda p: p.parent.name)
def test_component_health_list_matches_its_manifests(tmp_path: Path, list_path: Path) -> None:
    package = list_path.relative_to(SOURCES_DIR).parts[0]
    listed = {tuple(line.split()) for line in list_path.read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    rendered = manifest_workloads(package, package.removeprefix("microshift-"),
                                  list_path.parent.name, tmp_path / "rendered")
    assert rendered, f"no workloads rendered from {list_path.parent}"
    assert listed == rendered


def test_every_component_plugin_declares_its_workloads() -> None:
    plugins = sorted(SOURCES_DIR.glob("*/usr/lib/microshift/components.d/*/plugin"))
    assert plugins, "no component plugins found"
    missing = [p.parent.name for p in plugins if not (p.parent / "healthcheck.list").is_file()]
    assert missing == []


# --- the check against the stand-in API (curl, jq) ---------------------------------------

def run_check(tmp: Path, root: Path, health: Health,
              workloads: set[tuple[str, str, str]] | None = None) -> tuple[int, str, float]:
    with ApiServer() as api:
        write_kubeconfig(root, api.url)
        listed = workloads if workloads is not None else {
            ("openshift-service-ca", "deployment", "service-ca"),
            ("openshift-ingress", "deployment", "router-default"),
            ("openshift-dns", "daemonset", "dns-default"),
            ("openshift-dns", "daemonset", "node-resolver"),
            ("openshift-ovn-kubernetes", "daemonset", "ovnkube-master"),
            ("openshift-ovn-kubernetes", "daemonset", "ovnkube-node")}
        api.state.microshift_started(health, frozenset(listed))
        started = time.monotonic()
        proc = subprocess.run(["bash", str(root / CHECK)], env=script_env(tmp, root),
                              capture_output=True, text=True, check=False, timeout=60)
        return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


@pytest.mark.integration
def test_check_passes_when_everything_is_ready(tmp_path: Path) -> None:
    rc, out, _ = run_check(tmp_path, make_root(tmp_path, base="2"), Health())
    assert rc == 0, out
    assert "ok: daemonset openshift-ovn-kubernetes/ovnkube-node is ready" in out
    assert out.rstrip().endswith("FINISHED")


@pytest.mark.integration
@pytest.mark.parametrize("endpoint", ["/readyz", "/livez"])
def test_check_fails_within_its_budget_when_the_api_is_not_ready_or_not_live(
        tmp_path: Path, endpoint: str) -> None:
    """Every workload ready, but the API server answers one of its health endpoints with an
    error (stuck unready, or ready while restarting): the boot is not healthy. Only the
    API check can see it, so breaking that check must fail this test (issue 46)."""
    root = make_root(tmp_path, base="2")
    rc, out, seconds = run_check(tmp_path, root, Health(failing=frozenset({endpoint})))
    assert rc == 1, out
    assert "timed out after 2s waiting for: the API server is ready and live (/readyz, " \
           "/livez)" in out
    assert "ok: daemonset" not in out  # it failed at the API, before any workload
    assert seconds < 2 + 20  # its budget, and the time bash and curl need under load
    failure = root / "run/microshift-greenboot/healthcheck-failure.log"
    assert "the API server is ready and live" in failure.read_text()


@pytest.mark.integration
def test_check_fails_on_a_crashlooping_component_and_names_it(tmp_path: Path) -> None:
    root = make_root(tmp_path, base="1")
    rc, out, _ = run_check(tmp_path, root,
                           Health(crashloop=frozenset({"openshift-ovn-kubernetes/ovnkube-node"})))
    assert rc == 1
    assert "waiting for: daemonset openshift-ovn-kubernetes/ovnkube-node is ready" in out
    failure = root / "run/microshift-greenboot/healthcheck-failure.log"
    assert "ovnkube-node" in failure.read_text()


@pytest.mark.integration
def test_check_fails_when_a_listed_workload_does_not_exist(tmp_path: Path) -> None:
    rc, out, _ = run_check(tmp_path, make_root(tmp_path, base="1"), Health(), workloads=set())
    assert rc == 1
    assert "deployment openshift-service-ca/service-ca is ready" in out


@pytest.mark.integration
def test_check_fails_at_once_when_microshift_failed(tmp_path: Path) -> None:
    # As upstream's check: a failed unit will not become active; no need to wait it out.
    # Waiting it out would take 600 s; at once is well under a second, so the bound (60 s,
    # run_check's own timeout) is far from both, whatever the load.
    rc, out, seconds = run_check(tmp_path, make_root(tmp_path, base="600", active=False),
                                 Health())
    assert rc == 1 and seconds < 60
    assert "microshift.service failed" in out and out.rstrip().endswith("FAILURE")


@pytest.mark.integration
def test_check_waits_for_an_inactive_microshift_until_the_timeout(tmp_path: Path) -> None:
    rc, out, _ = run_check(tmp_path, make_root(tmp_path, base="1", state="activating"),
                           Health())
    assert rc == 1
    assert "waiting for: microshift.service is active" in out


@pytest.mark.integration
def test_check_reports_the_failed_component_plugin_with_its_message(tmp_path: Path) -> None:
    root = make_root(tmp_path, base="600", state="inactive")  # waited out: 600 s
    (root / "run/device-sim/units/microshift-components.service.is-active").write_text("failed")
    failure = root / "run/microshift-components/failure.log"
    failure.parent.mkdir(parents=True)
    failure.write_text("plugin 005-networking-ovnk failed with exit code 1: a system "
                       "precondition is unmet\n    the OVS gateway bridge br-ex does not exist\n")
    rc, out, seconds = run_check(tmp_path, root, Health())
    assert rc == 1 and seconds < 60
    assert "microshift-components.service failed" in out
    assert "the OVS gateway bridge br-ex does not exist" in out
    log = (root / "run/microshift-greenboot/healthcheck-failure.log").read_text()
    assert "plugin 005-networking-ovnk failed with exit code 1" in log


@pytest.mark.integration
def test_check_skips_when_microshift_is_not_enabled(tmp_path: Path) -> None:
    rc, out, _ = run_check(tmp_path, make_root(tmp_path, enabled=False), Health(ready_after=None))
    assert rc == 0
    assert "microshift.service is not enabled: nothing to check" in out


@pytest.mark.integration
@pytest.mark.parametrize(("counter", "passes"), [(2, False), (1, True)])
def test_slow_microshift_passes_only_with_the_grown_timeout(tmp_path: Path, counter: int,
                                                            passes: bool) -> None:
    # Ready 4.5 s after start; base 3 s: the first attempt (3 s) fails, the second (6 s)
    # passes. 1.5 s either side, so a loaded machine that starts the script late still
    # sees the same outcome; the first attempt failing shows it never waits past its own
    # timeout (a longer wait would have seen MicroShift ready).
    rc, out, _ = run_check(tmp_path, make_root(tmp_path, base="3", counter=counter),
                           Health(ready_after=4.5))
    assert (rc == 0) is passes, out
    assert f"Waiting up to {3 * (3 - counter)}s" in out


# --- shellcheck and the package ---------------------------------------------------------

@pytest.mark.integration
def test_every_shipped_script_and_stand_in_is_shellcheck_clean(tmp_path: Path) -> None:
    requires.need_tools("shellcheck")
    scripts = shell_scripts()
    assert len(scripts) == 5
    for name, text in STANDINS.items():
        if text.startswith("#!/usr/bin/python3"):
            compile(text, name, "exec")   # the SAMPLE bootc: Python (ruff in nox -s lint)
            continue
        (tmp_path / name).write_text(text)
        scripts.append(tmp_path / name)
    assert len(scripts) > 5 and "bootc" in STANDINS
    proc = subprocess.run(["shellcheck", "--external-sources", f"--source-path={GREENBOOT}",
                           *map(str, scripts)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_scripts_are_executable_and_the_library_is_not() -> None:
    for script in shell_scripts():
        executable = script.stat().st_mode & 0o111 != 0
        assert executable is (script != FUNCTIONS), script


# --- grubenv and greenboot's counting ---------------------------------------------------

def test_grubenv_is_a_1024_byte_grub_environment_block(tmp_path: Path) -> None:
    env = Grubenv(tmp_path / "grubenv")
    env.set(boot_counter="3", boot_success="0")
    data = (tmp_path / "grubenv").read_bytes()
    assert len(data) == 1024
    assert data.startswith(b"# GRUB Environment Block\nboot_counter=3\nboot_success=0\n###")
    assert env.read() == {"boot_counter": "3", "boot_success": "0"}


def test_grub_counts_down_then_boots_the_rollback_entry(tmp_path: Path) -> None:
    env = Grubenv(tmp_path / "grubenv")
    set_upgrade_counter(env, 3)
    entries = [grub_select(env) for _ in range(4)]
    assert entries == [0, 0, 0, 1]
    assert env.counter() == -1
    mark_success(env)
    assert env.read() == {"boot_success": "1"}
    assert grub_select(env) == 0  # a healthy system is not counted


def test_health_models_parse_and_bad_ones_say_what_is_allowed() -> None:
    assert parse_health("slow:4.5") == Health(ready_after=4.5)
    assert parse_health("crashloop:openshift-dns/dns-default").crashloop == {
        "openshift-dns/dns-default"}
    with pytest.raises(InputError, match="unknown health model 'sometimes'") as err:
        parse_health("sometimes")
    assert "crashloop:NAMESPACE/NAME" in str(err.value)


@pytest.mark.integration
def test_the_greenboot_spec_builds_a_noarch_rpm_with_the_scripts(tmp_path: Path) -> None:
    from builder.core.paths import SPECS_DIR
    from builder.core.runner import Runner
    from builder.core.templates import render_file
    from builder.rpm.packages import deterministic_tar
    from builder.rpm.rpmbuild import build_spec

    release = load_release(RELEASE)
    context = component_context(release, "core") | {
        "template_name": "microshift-greenboot.spec.j2",
        "changelog_date": time.strftime("%a %b %d %Y", time.gmtime(release.source_date_epoch))}
    name = f"microshift-greenboot-{release.version}"
    tree = tmp_path / "tree"
    render_source_tree("microshift-greenboot", context, tree)
    (tmp_path / "top/SOURCES").mkdir(parents=True)
    (tmp_path / "top/SOURCES" / f"{name}.tar").write_bytes(
        deterministic_tar(tree, name, release.source_date_epoch))
    spec = tmp_path / "microshift-greenboot.spec"
    spec.write_text(render_file(SPECS_DIR, "microshift-greenboot.spec.j2", context))
    [rpm] = build_spec(Runner(), spec, tmp_path / "top", "x86_64", release.source_date_epoch)
    assert rpm.name == f"{name}-{release.release}.noarch.rpm"
    files = subprocess.run(["rpm", "-qpl", str(rpm)], capture_output=True, text=True,
                           check=True).stdout.split()
    assert f"/{CHECK}" in files
    assert "/usr/lib/greenboot/red.d/40-microshift-pre-rollback.sh" in files
    assert "/usr/lib/systemd/system/microshift-data-restore.service" in files
    requires = subprocess.run(["rpm", "-qpR", str(rpm)], capture_output=True, text=True,
                              check=True).stdout
    assert f"microshift-core = {release.version}-{release.release}" in requires
    assert "greenboot >= 0.15" in requires


# --- microshift-data-restore: backup and restore per deployment ---------------------------

DEPLOY_A = "a" * 64 + ".0"
DEPLOY_B = "b" * 64 + ".0"
RESTORE = "usr/libexec/microshift-greenboot/microshift-data-restore"


def booted_root(tmp: Path, booted: str) -> Path:
    """A root whose /usr is deployment `booted` of a sysroot holding deployments A and B."""
    sysroot = tmp / "sysroot"
    for deployment in (DEPLOY_A, DEPLOY_B):
        render_source_tree("microshift-greenboot", {},
                           sysroot / "ostree/deploy/edge/deploy" / deployment)
    root = tmp / "root"
    (root / "run").mkdir(parents=True)
    (root / "run/ostree-booted").touch()
    (root / "sysroot").symlink_to(sysroot)
    (root / "usr").symlink_to(sysroot / "ostree/deploy/edge/deploy" / booted / "usr")
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("0a2c-77\n")
    (root / "var/lib/microshift").mkdir(parents=True)
    (root / "var/lib/microshift/version").write_text("data\n")
    (root / "var/lib/microshift-backups").mkdir(parents=True)
    return root


def run_restore(tmp: Path, root: Path) -> str:
    proc = subprocess.run(["bash", str(root / RESTORE)], env=script_env(tmp, root),
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def write_json(path: Path, data: dict[str, str]) -> None:
    path.write_text(json.dumps(data))


@pytest.mark.integration
def test_after_a_healthy_boot_the_data_is_backed_up_under_that_deployment(tmp_path: Path) -> None:
    root = booted_root(tmp_path, booted=DEPLOY_B)  # upgraded from A to B
    backups = root / "var/lib/microshift-backups"
    write_json(backups / "health.json", {"health": "healthy", "deployment_id": DEPLOY_A})
    (backups / ("d" * 64 + ".3")).mkdir()  # backup of a deployment that no longer exists
    out = run_restore(tmp_path, root)
    assert (backups / DEPLOY_A / "version").read_text() == "data\n"
    assert f"Backed up MicroShift data of healthy deployment {DEPLOY_A}" in out
    assert not (backups / ("d" * 64 + ".3")).exists()


@pytest.mark.integration
def test_after_a_rollback_the_rolled_back_deployment_gets_its_own_data(tmp_path: Path) -> None:
    root = booted_root(tmp_path, booted=DEPLOY_A)  # B failed, grub fell back to A
    backups = root / "var/lib/microshift-backups"
    (backups / DEPLOY_A).mkdir()
    (backups / DEPLOY_A / "version").write_text("A's data\n")
    (root / "var/lib/microshift/version").write_text("migrated by B\n")
    write_json(backups / "health.json", {"health": "unhealthy", "deployment_id": DEPLOY_B})
    write_json(backups / "restore", {"failed_deployment_id": DEPLOY_B})
    out = run_restore(tmp_path, root)
    assert (root / "var/lib/microshift/version").read_text() == "A's data\n"
    assert (backups / "failed" / DEPLOY_B / "version").read_text() == "migrated by B\n"
    assert not (backups / "restore").exists()
    assert f"Restored MicroShift data of deployment {DEPLOY_A}" in out


@pytest.mark.integration
def test_no_restore_when_the_failed_deployment_is_booted_again(tmp_path: Path) -> None:
    root = booted_root(tmp_path, booted=DEPLOY_B)
    backups = root / "var/lib/microshift-backups"
    (backups / DEPLOY_B).mkdir()
    write_json(backups / "restore", {"failed_deployment_id": DEPLOY_B})
    out = run_restore(tmp_path, root)
    assert (root / "var/lib/microshift/version").read_text() == "data\n"
    assert "no rollback happened, data left in place" in out
    assert not (backups / "restore").exists()


@pytest.mark.integration
def test_a_failed_boot_that_greenboot_retries_leaves_the_data_alone(tmp_path: Path) -> None:
    root = booted_root(tmp_path, booted=DEPLOY_B)
    backups = root / "var/lib/microshift-backups"
    write_json(backups / "health.json", {"health": "unhealthy", "deployment_id": DEPLOY_B})
    out = run_restore(tmp_path, root)
    assert "left in place for the retry" in out
    assert sorted(p.name for p in backups.iterdir()) == ["health.json"]
