"""Blueprint profiles, rendering, osbuild-rule validation, the offline image cache and the
`blueprint` command (render + validate + depsolve in one go)."""

from __future__ import annotations

import copy
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.blueprint.images import (
    ManifestImage,
    check_architectures,
    missing_images,
    scan_tree,
)
from builder.blueprint.render import (
    GREENBOOT_SERVICES,
    load_profile,
    load_profiles,
    render_blueprint,
    semver_for,
    toml_string,
    toml_text,
)
from builder.blueprint.validate import (
    check_blueprint,
    go_clean,
    is_semver,
    validate_blueprint,
)
from builder.core.errors import BuildError, InputError
from builder.release.model import Release, load_release
from builder.sources.samples import write_oci_layout
from tests.support.cli import PROJECT_ROOT, RELEASE, run_cli

BLUEPRINTS = PROJECT_ROOT / "blueprints"
# Seed 003, "Proposal details": the four use cases and the packages each installs.
SEED_003 = {
    "microshift-full": ("core", "networking-ovnk", "storage-topolvm"),
    "microshift-networking": ("core", "networking-ovnk"),
    "microshift-minimal": ("core",),
    "microshift-storage": ("core", "storage-topolvm"),
}
DIGEST = "@sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def release() -> Release:
    return load_release(RELEASE)


def rendered(release: Release, name: str, blueprints: Path = BLUEPRINTS) -> dict[str, Any]:
    return tomllib.loads(render_blueprint(release, load_profile(name, blueprints)))


# --- profiles and rendering ---------------------------------------------------------------


def test_the_four_profiles_of_seed_003() -> None:
    profiles = load_profiles()
    assert {name: p.components for name, p in profiles.items()} == SEED_003


@pytest.mark.parametrize("name", sorted(SEED_003))
def test_every_profile_renders_to_a_valid_blueprint(release: Release, name: str) -> None:
    text = render_blueprint(release, load_profile(name))
    data = check_blueprint(text, f"blueprints/{name}.toml")  # raises on any rule violation
    assert data["name"] == name
    assert data["version"] == "4.14.2-1"
    packages = {p["name"]: p["version"] for p in data["packages"]}
    expected = {f"microshift-{key}" for key in SEED_003[name]} | {"microshift-greenboot",
                                                                   "microshift-selinux",
                                                                   "microshift-update"}
    assert packages == dict.fromkeys(expected, "4.14.2-1")
    sources = [c["source"] for c in data["containers"]]
    assert sorted(sources) == sorted(img.ref for img in release.images(SEED_003[name]))
    assert len(set(sources)) == len(sources)


def test_whole_stack_caches_every_image_by_digest_and_enables_services(
        release: Release) -> None:
    data = rendered(release, "microshift-full")
    images = release.images(("core", "networking-ovnk", "storage-topolvm"))
    assert len(data["containers"]) == len(images) == 11
    for entry in data["containers"]:
        assert "@sha256:" in entry["source"]
        assert entry["tls-verify"] is True
    # The pause image CRI-O starts every pod with is cached like the others, by digest.
    pause = release.component("core").images[0]
    assert pause.name == "pause" and pause.ref in [c["source"] for c in data["containers"]]
    custom = data["customizations"]
    assert custom["services"]["enabled"] == [
        "microshift.service", "microshift-components.service", "microshift-ovs-init.service",
        "openvswitch.service", *GREENBOOT_SERVICES, "microshift-update.timer"]
    assert "greenboot-healthcheck.service" in GREENBOOT_SERVICES
    firewall = custom["firewall"]
    assert firewall["ports"] == ["6443:tcp", "80:tcp", "443:tcp", "5353:udp", "30000-32767:tcp",
                                 "30000-32767:udp"]
    assert firewall["zones"] == [{"name": "trusted",
                                  "sources": ["10.42.0.0/16", "fd01::/48", "169.254.169.1"]}]
    files = {f["path"]: f["data"] for f in custom["files"]}
    assert set(files) == {"/etc/microshift/config.yaml", "/etc/microshift/ovn.yaml",
                          "/etc/systemd/journald.conf.d/microshift.conf",
                          "/etc/greenboot/greenboot.conf"}
    journald = files["/etc/systemd/journald.conf.d/microshift.conf"].splitlines()
    assert "[Journal]" in journald and "Storage=persistent" in journald
    assert "mtu: 1400" in files["/etc/microshift/ovn.yaml"]
    assert "GREENBOOT_MAX_BOOT_ATTEMPTS=3" in files["/etc/greenboot/greenboot.conf"]


def test_without_ovnk_there_is_no_ovn_config_nor_ovnk_service(release: Release) -> None:
    custom = rendered(release, "microshift-storage")["customizations"]
    assert "/etc/microshift/ovn.yaml" not in [f["path"] for f in custom["files"]]
    assert custom["services"]["enabled"] == ["microshift.service",
                                             "microshift-components.service",
                                             *GREENBOOT_SERVICES, "microshift-update.timer"]
    assert custom["firewall"]["zones"][0]["sources"] == ["10.42.0.0/16", "fd01::/48"]


def copy_blueprints(tmp_path: Path) -> Path:
    target = tmp_path / "blueprints"
    shutil.copytree(BLUEPRINTS, target)
    return target


def test_adding_a_package_to_every_image_is_one_line(release: Release, tmp_path: Path) -> None:
    blueprints = copy_blueprints(tmp_path)
    profiles = blueprints / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace(
        "  packages:\n    - microshift-greenboot\n",
        "  packages:\n    - microshift-greenboot\n    - microshift-multus\n", 1))
    for name in SEED_003:
        packages = rendered(release, name, blueprints)["packages"]
        assert {"name": "microshift-multus", "version": "4.14.2-1"} in packages


def test_settings_reach_the_file_customizations(release: Release, tmp_path: Path) -> None:
    blueprints = copy_blueprints(tmp_path)
    profiles = blueprints / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace("ovn_mtu: 1400", "ovn_mtu: 1500")
                        .replace("max_boot_attempts: 3", "max_boot_attempts: 5"))
    files = {f["path"]: f["data"]
             for f in rendered(release, "microshift-full", blueprints)["customizations"]["files"]}
    assert "mtu: 1500" in files["/etc/microshift/ovn.yaml"]
    assert "GREENBOOT_MAX_BOOT_ATTEMPTS=5" in files["/etc/greenboot/greenboot.conf"]


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (("[core, networking-ovnk, storage-topolvm]", "[core, networking-fancy]"),
     "images.microshift-full.components", "'networking-fancy' is not allowed"),
    (("[core, storage-topolvm]", "[storage-topolvm]"),
     "images.microshift-storage.components", "must include core"),
    (("log_level: Normal", "log_level: Verbose"), "settings.log_level", "'Verbose'"),
    (("ovn_mtu: 1400", "ovn_mtu: 100"), "settings.ovn_mtu", "1280 to 65535"),
])
def test_profile_errors_name_file_and_field(tmp_path: Path, edit: tuple[str, str], field: str,
                                            problem: str) -> None:
    blueprints = copy_blueprints(tmp_path)
    profiles = blueprints / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace(*edit))
    with pytest.raises(InputError) as err:
        load_profiles(blueprints)
    assert err.value.path == str(profiles)
    assert field in err.value.field
    assert problem in str(err.value)


def test_profile_without_template_is_refused(tmp_path: Path) -> None:
    blueprints = copy_blueprints(tmp_path)
    (blueprints / "microshift-minimal.toml.j2").unlink()
    with pytest.raises(InputError, match=r"images\.microshift-minimal: has no template"):
        load_profiles(blueprints)


def test_unknown_image_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match="no image named 'microshift-tiny'; allowed: "
                                         "microshift-full, microshift-minimal"):
        load_profile("microshift-tiny")


@pytest.mark.parametrize(("version", "release", "expected"), [
    ("4.14.2", "1", "4.14.2-1"),
    ("4.14", "3.el9", "4.14.0-3.el9"),
    ("4.15.0~rc.1", "1", "4.15.0-rc.1.1"),
    ("4.14.02", "1_2", "4.14.2-1.2"),
])
def test_blueprint_version_is_semver_derived_from_the_rpm_evr(version: str, release: str,
                                                                expected: str) -> None:
    assert semver_for(version, release) == expected
    assert is_semver(expected)


@pytest.mark.parametrize(("version", "valid"), [
    ("0.0.1", True), ("4.14.2-1", True), ("1.2.3-rc.1+build.5", True), ("01.2.3", True),
    ("1.2", False), ("1.2.3.4", False), ("v1.2.3", False), ("1.2.3-rc_1", False),
    ("1.2.x", False), ("", False),
])
def test_semver_follows_go_semver(version: str, valid: bool) -> None:
    assert is_semver(version) is valid


@pytest.mark.parametrize("text", [
    "plain\n", "quotes \" and ''' and \\ backslash\n", "tab\tcr\r\nnul\0 del\x7f",
    "ends with a quote'", "", "unicode é ✓ \U0001f600\n",
])
def test_toml_strings_round_trip(text: str) -> None:
    for encoded in (toml_string(text), toml_text(text)):
        assert tomllib.loads(f"v = {encoded}")["v"] == text


# --- validation -------------------------------------------------------------------------


BAD_BLUEPRINT = f'''
name = "micro shift"
version = "4.14"
colour = "blue"

[[packages]]
version = "1.0"

[[packages]]
name = "ok"
version = "1 .0"

[[containers]]
source = "quay.io/example/app:latest"

[customizations.firewall]
ports = ["6443:tcp", "32767-30000:tcp", "http"]

[[customizations.firewall.zones]]
name = "trusted"
sources = ["10.42.0.0/16", "not-an-address"]

[[customizations.files]]
path = "/etc/microshift/config.yaml"
data = "x"

[[customizations.files]]
path = "etc/relative"

[[customizations.files]]
path = "/etc/passwd"
data = "root::0:0::/root:/bin/sh"

[[customizations.files]]
path = "/usr/lib/systemd/system/evil.service"

[[customizations.files]]
path = "/etc/microshift/config.yaml"

[[customizations.files]]
path = "/etc/x/../y"
mode = "644x"
user = "bad user"
group = -1
data = "a"
uri = "file:///tmp/a"

[[customizations.files]]
path = "/etc/microshift/config.yaml/inner"

[[customizations.directories]]
path = "/var/lib/microshift"
ensure_parents = "yes"

[[containers]]
source = "quay.io/example/ok{DIGEST}"
'''

EXPECTED_VIOLATIONS = {
    "name": "'micro shift' is not allowed",
    "version": "'4.14' is not a semantic version",
    "colour": "unknown field",
    "packages[0].name": "is required",
    "packages[1].version": "'1 .0' is not allowed",
    "containers[0].source": "is not pinned by digest",
    "customizations.firewall.ports[1]": "the range starts after it ends",
    "customizations.firewall.ports[2]": "'http' is not allowed",
    "customizations.firewall.zones[0].sources[1]": "'not-an-address' is not allowed",
    "customizations.files[1].path": "'etc/relative' must be absolute",
    "customizations.files[2].path": "/etc/passwd is not allowed",
    "customizations.files[3].path": "/usr/lib/systemd/system/evil.service is not allowed",
    "customizations.files[4].path": "duplicate path /etc/microshift/config.yaml "
                                    "(also customizations.files[0].path)",
    "customizations.files[5].path": "must be canonical (/etc/y)",
    "customizations.files[5].mode": "'644x' is not allowed",
    "customizations.files[5].user": "'bad user' is not a valid user name",
    "customizations.files[5].group": "id -1 must not be negative",
    "customizations.files[5].uri": "data and uri are exclusive",
    "customizations.files[6].path": "is below /etc/microshift/config.yaml, which "
                                    "customizations.files[0] creates as a file",
    "customizations.directories[0].path": "/var/lib/microshift is not allowed: directories "
                                          "are allowed only under /etc",
    "customizations.directories[0].ensure_parents": "expected true or false",
}


def test_each_violation_is_reported_with_its_toml_path() -> None:
    violations = validate_blueprint(tomllib.loads(BAD_BLUEPRINT))
    found = {v.field: v.problem for v in violations}
    for field, problem in EXPECTED_VIOLATIONS.items():
        assert field in found, f"no violation reported for {field}"
        assert problem in found[field], f"{field}: {found[field]}"
    assert len(violations) == len(EXPECTED_VIOLATIONS)


def _tables(node: Any, at: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every table of a parsed blueprint, with its TOML path."""
    if isinstance(node, list):
        return [t for i, item in enumerate(node) for t in _tables(item, f"{at}[{i}]")]
    if not isinstance(node, dict):
        return []
    found = [(at, node)]
    for key, value in node.items():
        found += _tables(value, f"{at}.{key}" if at else key)
    return found


def test_a_mistyped_key_in_any_table_of_a_blueprint_is_named_with_the_key_meant(
        release: Release) -> None:
    """Each key of each table of the rendered whole-stack blueprint, two letters swapped."""
    blueprint = rendered(release, "microshift-full")
    cases = [(at, key) for at, table in _tables(blueprint) for key in table]
    assert len(cases) > 20
    for at, key in cases:
        data = copy.deepcopy(blueprint)
        table = dict(_tables(data))[at]
        typo = key[0] + key[2] + key[1] + key[3:]
        table[typo] = table.pop(key)
        found = {v.field: v.problem for v in validate_blueprint(data)}
        field = f"{at}.{typo}" if at else typo
        assert found.get(field, "").startswith(f"unknown field; did you mean `{key}`? "
                                               "allowed: "), (field, found)


def test_check_blueprint_lists_every_violation_prefixed_by_the_file() -> None:
    with pytest.raises(BuildError) as err:
        check_blueprint(BAD_BLUEPRINT, "blueprints/microshift-full.toml")
    lines = str(err.value).splitlines()
    assert lines[0] == (f"blueprints/microshift-full.toml: {len(EXPECTED_VIOLATIONS)} "
                        "blueprint rule violation(s):")
    assert ("blueprints/microshift-full.toml: customizations.files[2].path: /etc/passwd is "
            "not allowed") in "\n".join(lines)


def test_invalid_toml_names_the_line() -> None:
    with pytest.raises(InputError, match=r"blueprints/x.toml: not valid TOML: .*line 2"):
        check_blueprint('name = "x"\nversion = \n', "blueprints/x.toml")


@pytest.mark.parametrize(("path", "clean"), [
    ("/etc/a", "/etc/a"), ("//etc//a", "/etc/a"), ("/etc/./a", "/etc/a"),
    ("/etc/a/../b", "/etc/b"), ("/../etc", "/etc"), ("/", "/"),
])
def test_go_path_clean(path: str, clean: str) -> None:
    assert go_clean(path) == clean


# --- offline image cache ------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def plugin_tree(root: Path) -> Path:
    plugin = root / "usr/lib/microshift/components.d/005-networking-ovnk"
    write(plugin / "kustomization.yaml", f"""\
resources: [daemonset.yaml, job.yaml]
images:
  - name: quay.io/example/rewritten
    newName: quay.io/example/real
    digest: sha256:{"cd" * 32}
""")
    write(plugin / "daemonset.yaml", f"""\
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: ovnkube-node}}
spec:
  template:
    spec:
      initContainers:
        - name: init
          image: quay.io/example/init{DIGEST}
      containers:
        - name: node
          image: quay.io/example/node:v4.14
        - name: rewritten
          image: quay.io/example/rewritten:latest
""")
    write(plugin / "job.yaml", f"""\
apiVersion: v1
kind: ConfigMap
metadata: {{name: not-a-pod}}
data:
  image: quay.io/example/not-an-image
---
apiVersion: batch/v1
kind: Job
spec:
  template:
    spec:
      containers:
        - name: job
          image: quay.io/example/job{DIGEST}
""")
    return root


def test_scanner_finds_pod_images_and_applies_kustomize_rewrites(tmp_path: Path) -> None:
    found = scan_tree(plugin_tree(tmp_path))
    refs = {(image.file.rsplit("/", 1)[1], image.field, image.ref) for image in found}
    assert refs == {
        ("daemonset.yaml", "spec.template.spec.initContainers[0].image",
         f"quay.io/example/init{DIGEST}"),
        ("daemonset.yaml", "spec.template.spec.containers[0].image",
         "quay.io/example/node:v4.14"),
        ("daemonset.yaml", "spec.template.spec.containers[1].image",
         "quay.io/example/real@sha256:" + "cd" * 32),
        ("job.yaml", "(document 2).spec.template.spec.containers[0].image",
         f"quay.io/example/job{DIGEST}"),
    }


def test_missing_and_tag_only_images_fail_naming_image_and_component(tmp_path: Path) -> None:
    found = {"networking-ovnk": scan_tree(plugin_tree(tmp_path))}
    cached = [f"quay.io/example/init{DIGEST}", "quay.io/example/real@sha256:" + "cd" * 32]
    problems = missing_images(found, cached)
    assert len(problems) == 2
    assert any("component networking-ovnk" in p and "quay.io/example/node:v4.14 is a tag "
               "without a digest" in p for p in problems)
    assert any(f"image quay.io/example/job{DIGEST} is not in the blueprint's [[containers]]"
               in p and "components.networking-ovnk.images" in p for p in problems)


def test_everything_cached_is_no_problem() -> None:
    image = ManifestImage("a.yaml", "spec.containers[0].image", f"quay.io/x{DIGEST}")
    assert missing_images({"core": [image]}, [f"quay.io/x{DIGEST}"]) == []


# --- the command ----------------------------------------------------------------------------


def test_release_without_a_digest_fails_naming_the_image(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    release = tmp_path / "release.yaml"
    text = RELEASE.read_text()
    ref = load_release(RELEASE).images(("networking-ovnk",))[0].ref
    release.write_text(text.replace(ref, ref.split("@")[0] + ":v4.14"))
    assert run_cli("--release", release, "blueprint", "--image", "microshift-full",
                   "--build-dir", tmp_path / "build") == 2
    err = capsys.readouterr().err
    assert "quay.io/microshift-sample/ovn-kubernetes:v4.14" in err
    assert "not pinned by digest" in err
    assert not (tmp_path / "build" / "blueprints").exists()


def both_providers(tmp_path: Path) -> Path:
    blueprints = copy_blueprints(tmp_path)
    with (blueprints / "profiles.yaml").open("a") as profiles:
        profiles.write("  microshift-both:\n    description: two networking providers\n"
                       "    components: [core, networking-ovnk, networking-bridge]\n")
    (blueprints / "microshift-both.toml.j2").write_text(
        '{% extends "_microshift.toml.j2" %}\n')
    return blueprints


@pytest.mark.integration
def test_whole_stack_blueprint_and_lock(built_release: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(built_release, build, symlinks=True)
    assert run_cli("blueprint", "--image", "microshift-full", "--build-dir", build) == 0
    data = tomllib.loads((build / "blueprints/microshift-full.toml").read_text())
    release = load_release(RELEASE)
    assert {p["name"]: p["version"] for p in data["packages"]} == {
        "microshift-core": release.evr, "microshift-networking-ovnk": release.evr,
        "microshift-storage-topolvm": release.evr, "microshift-greenboot": release.evr,
        "microshift-selinux": release.evr, "microshift-update": release.evr}
    images = release.images(("core", "networking-ovnk", "storage-topolvm"))
    assert [c["source"] for c in data["containers"]] == [img.ref for img in images]
    assert all("@sha256:" in c["source"] for c in data["containers"])
    lock_path = build / "blueprints/microshift-full.x86_64.lock.json"
    lock = json.loads(lock_path.read_text())
    nevras = [p["nevra"] for p in lock["packages"]]
    assert "microshift-core-4.14.2-1.x86_64" in nevras
    assert "microshift-networking-ovnk-4.14.2-1.noarch" in nevras
    assert any(n.startswith("cri-o-") for n in nevras)  # from the sample base repository
    for pkg in lock["packages"]:
        rpm = lock_path.parent / lock["repos"][pkg["repo"]]["path"] / pkg["location"]
        assert rpm.is_file(), pkg["nevra"]
        assert pkg["checksum"] == f"sha256:{pkg['sha256']}"
    first = lock_path.read_bytes()
    assert run_cli("blueprint", "--image", "microshift-full", "--build-dir", build) == 0
    assert lock_path.read_bytes() == first  # deterministic


@pytest.mark.integration
def test_two_networking_providers_fail_at_depsolve_naming_both(
        built_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blueprints = both_providers(tmp_path)
    build = tmp_path / "build"
    shutil.copytree(built_release, build, symlinks=True)
    stale = build / "blueprints" / "microshift-both.toml"
    stale.parent.mkdir(exist_ok=True)
    stale.write_text("# from an earlier release\n")
    assert run_cli("blueprint", "--image", "microshift-both", "--blueprints", blueprints,
                   "--build-dir", build) == 1
    err = capsys.readouterr().err
    assert "error: blueprints/microshift-both.toml: depsolve failed" in err
    assert "microshift-networking-ovnk-4.14.2-1" in err
    assert "microshift-networking-bridge-4.14.2-1" in err
    assert "microshift-networking-provider" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in (build / "blueprints").iterdir()) == []


@pytest.mark.integration
def test_every_profile_passes_the_offline_check_against_the_real_plugins(
        built_release: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(built_release, build, symlinks=True)
    assert run_cli("blueprint", "--image", "all", "--build-dir", build) == 0
    assert sorted(p.name for p in (build / "blueprints").glob("*.toml")) == [
        f"{name}.toml" for name in sorted(SEED_003)]


def test_a_two_architecture_release_whose_local_image_lacks_arm64_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = write_oci_layout(tmp_path / "images" / "pause", "core", "pause",
                              arches=("x86_64",))
    data = yaml.safe_load(RELEASE.read_text())
    data["architectures"] = ["x86_64", "aarch64"]
    ref = f"quay.io/microshift-sample/pause@{layout.digest}"
    data["components"]["core"]["images"]["pause"] = {"ref": ref, "source": "oci:images/pause"}
    release = tmp_path / "release.yaml"
    release.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_cli("--release", release, "blueprint", "--image", "microshift-full",
                   "--build-dir", tmp_path / "build") == 2
    err = capsys.readouterr().err
    assert (f"error: {release}: components.core.images.pause.ref: {ref}: no image for aarch64 "
            "(linux/arm64): its manifest list offers linux/amd64; "
            "blueprints/microshift-full.toml caches it for a release of x86_64, aarch64") in err
    assert "Traceback" not in err
    assert not list((tmp_path / "build").glob("blueprints/*"))
    # The same image serves a release of x86_64 alone: only the missing architecture stops it.
    data["architectures"] = ["x86_64"]
    release.write_text(yaml.safe_dump(data, sort_keys=False))
    check_architectures(load_release(release), [ref], "blueprints/microshift-full.toml")
