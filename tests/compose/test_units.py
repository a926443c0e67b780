"""Unit tests of the compose's pure-Python parts: unit enablement, the image store
normalisation, /var handling, firewall zones, and the input readers' errors."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from builder.compose.commit import kill_at
from builder.compose.containers import normalize_store, write_storage_conf
from builder.compose.customizations import apply_firewall, write_file
from builder.compose.inputs import FileSpec, FirewallZone, load_compose_inputs
from builder.compose.rootfs import tree_path, var_to_tmpfiles
from builder.compose.units import apply_presets, disable, enable
from builder.core.errors import BuildError, InputError
from builder.release.ostree_config import parse_ostree
from tests.support import requires
from tests.support.cli import RELEASE

UNIT = """[Unit]
Description=x

[Service]
ExecStart=/bin/true

[Install]
WantedBy=multi-user.target
Alias=ms.service
"""


OWNS_FILES = requires.root_only("the image tree's files are owned by root:root")


def _unit(tree: Path, name: str, text: str = UNIT) -> None:
    path = tree / "usr/lib/systemd/system" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _preset(tree: Path, directory: str, name: str, text: str) -> None:
    path = tree / directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_enable_creates_wants_and_alias_links_as_systemctl_does(tmp_path: Path) -> None:
    _unit(tmp_path, "microshift.service")
    made = enable(tmp_path, "microshift.service")
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants/microshift.service"
    assert os.readlink(wants) == "/usr/lib/systemd/system/microshift.service"
    assert os.readlink(tmp_path / "etc/systemd/system/ms.service").endswith("microshift.service")
    assert sorted(made) == ["/etc/systemd/system/ms.service",
                            "/etc/systemd/system/multi-user.target.wants/microshift.service"]
    assert disable(tmp_path, "microshift.service")
    assert not wants.is_symlink()


def test_presets_first_match_wins_and_etc_shadows_usr_lib(tmp_path: Path) -> None:
    for name in ("a.service", "b.service", "c.service"):
        _unit(tmp_path, name)
    _unit(tmp_path, "static.service", "[Service]\nExecStart=/bin/true\n")
    _preset(tmp_path, "usr/lib/systemd/system-preset", "50-x.preset",
            "enable a.service\ndisable b.service\nenable b.service\n")
    _preset(tmp_path, "usr/lib/systemd/system-preset", "90-default.preset", "disable *\n")
    # Same file name in /etc replaces the /usr/lib one entirely.
    _preset(tmp_path, "usr/lib/systemd/system-preset", "10-c.preset", "enable c.service\n")
    _preset(tmp_path, "etc/systemd/system-preset", "10-c.preset", "disable c.service\n")
    enabled = apply_presets(tmp_path, ["a.service", "b.service", "c.service", "static.service"])
    assert enabled == ["a.service"]


def test_enabling_a_missing_unit_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError,
                       match=r"^cannot enable nothere\.service: no unit file in the tree$"):
        enable(tmp_path, "nothere.service")


def _layer(overlay: Path, layer_id: str, link: str, lower: str | None = None) -> None:
    (overlay / layer_id / "diff").mkdir(parents=True)
    (overlay / layer_id / "link").write_text(link)
    (overlay / "l").mkdir(exist_ok=True)
    (overlay / "l" / link).symlink_to(f"../{layer_id}/diff")
    if lower:
        (overlay / layer_id / "lower").write_text(lower)


def _store(root: Path, links: tuple[str, str], created: str) -> Path:
    store = root / "storage"
    overlay = store / "overlay"
    _layer(overlay, "aaa", links[0])
    _layer(overlay, "bbb", links[1], lower=f"l/{links[0]}")
    (store / "overlay-images").mkdir(parents=True)
    (store / "overlay-images/images.json").write_text(
        json.dumps([{"id": "i", "created": created}], separators=(",", ":")))
    (store / "overlay-images/images.lock").write_bytes(os.urandom(64))
    return store


def _snapshot(store: Path) -> dict[str, str]:
    return {p.relative_to(store).as_posix(): (os.readlink(p) if p.is_symlink()
                                              else p.read_bytes().hex() if p.is_file() else "d")
            for p in sorted(store.rglob("*"))}


@OWNS_FILES
def test_normalized_store_is_identical_whatever_the_random_names_and_times(
        tmp_path: Path) -> None:
    one = _store(tmp_path / "1", ("RANDOMONE", "RANDOMTWO"), "2026-01-01T00:00:00.1Z")
    two = _store(tmp_path / "2", ("OTHERNAME", "ANOTHERONE"), "2027-05-05T11:11:11.9Z")
    normalize_store(one, 1700000000)
    normalize_store(two, 1700000000)
    assert _snapshot(one) == _snapshot(two)
    new_link = (one / "overlay/aaa/link").read_text()
    assert (one / "overlay/bbb/lower").read_text() == f"l/{new_link}"
    assert os.readlink(one / "overlay/l" / new_link) == "../aaa/diff"
    assert b'"created":"2023-11-14T22:13:20Z"' in (one / "overlay-images/images.json").read_bytes()
    assert (one / "overlay-images/images.lock").read_bytes() == b""


@OWNS_FILES
def test_storage_conf_merges_into_the_base_config(tmp_path: Path) -> None:
    conf = tmp_path / "etc/containers/storage.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text('[storage]\ndriver = "overlay"\nrunroot = "/run/containers/storage"\n'
                    '[storage.options]\nadditionalimagestores = ["/opt/images"]\n')
    write_storage_conf(tmp_path)
    write_storage_conf(tmp_path)  # idempotent: the store is listed once
    text = conf.read_text()
    assert tomllib.loads(text)["storage"]["options"]["additionalimagestores"] == [
        "/opt/images", "/usr/share/containers/storage"]
    assert 'runroot = "/run/containers/storage"' in text


@OWNS_FILES
def test_storage_conf_keeps_the_bases_comments_and_order(tmp_path: Path) -> None:
    conf = tmp_path / "etc/containers/storage.conf"
    conf.parent.mkdir(parents=True)
    original = ('# containers-storage.conf(5), as containers-common ships it\n[storage]\n'
                '# Default storage driver\ndriver = "overlay"\n\n[storage.options]\n'
                '# Paths to additional container image stores.\nadditionalimagestores = [\n]\n'
                '# Remap uids\nremap-uids = ""\n')
    conf.write_text(original)
    write_storage_conf(tmp_path)
    text = conf.read_text()
    for line in original.splitlines():
        if line.startswith("#") or " = " in line:
            assert line in text, line
    assert text.index("# Paths to additional") < text.index("/usr/share/containers/storage") \
        < text.index("# Remap uids")
    assert tomllib.loads(text)["storage"]["options"]["additionalimagestores"] == [
        "/usr/share/containers/storage"]


@OWNS_FILES
def test_storage_conf_is_written_when_the_base_has_none(tmp_path: Path) -> None:
    write_storage_conf(tmp_path)
    data = tomllib.loads((tmp_path / "etc/containers/storage.conf").read_text())
    assert data == {"storage": {"driver": "overlay", "options": {
        "additionalimagestores": ["/usr/share/containers/storage"]}}}


def test_tree_path_keeps_absolute_symlinks_inside_the_tree(tmp_path: Path) -> None:
    (tmp_path / "var/usrlocal/bin").mkdir(parents=True)
    (tmp_path / "usr").mkdir()
    (tmp_path / "usr/local").symlink_to("/var/usrlocal")
    assert tree_path(tmp_path, "/usr/local/bin/tool") == tmp_path / "var/usrlocal/bin/tool"
    (tmp_path / "escape").symlink_to("../../../../etc")
    assert tree_path(tmp_path, "/escape/passwd") == tmp_path / "etc/passwd"


@OWNS_FILES
def test_var_content_becomes_tmpfiles_lines_and_var_ends_empty(tmp_path: Path) -> None:
    (tmp_path / "var/lib/app").mkdir(parents=True)
    (tmp_path / "var/lib/app/seed").write_text("seed\n")
    (tmp_path / "var/lib/declared").mkdir()
    (tmp_path / "var/run").symlink_to("../run")
    tmpfiles = tmp_path / "usr/lib/tmpfiles.d"
    tmpfiles.mkdir(parents=True)
    (tmpfiles / "pkg.conf").write_text("d /var/lib/declared 0700 root root -\n")
    lines = var_to_tmpfiles(tmp_path)
    assert list((tmp_path / "var").iterdir()) == []
    assert any(line.startswith("d /var/lib/app ") for line in lines)
    assert "L /var/run - - - - ../run" in lines
    assert "C /var/lib/app/seed - - - - /usr/share/factory/var/lib/app/seed" in lines
    assert (tmp_path / "usr/share/factory/var/lib/app/seed").read_text() == "seed\n"
    assert not any("/var/lib/declared" in line for line in lines)


@OWNS_FILES
def test_firewall_extends_the_base_zone_definition(tmp_path: Path) -> None:
    zones = tmp_path / "usr/lib/firewalld/zones"
    zones.mkdir(parents=True)
    (zones / "public.xml").write_text('<zone><short>Public</short>'
                                      '<service name="ssh"/></zone>')
    apply_firewall(tmp_path, ("6443:tcp", "30000-32767:udp"),
                   (FirewallZone("trusted", ("10.42.0.0/16",)),))
    public = (tmp_path / "etc/firewalld/zones/public.xml").read_text()
    assert '<service name="ssh" />' in public
    assert '<port port="30000-32767" protocol="udp" />' in public
    trusted = (tmp_path / "etc/firewalld/zones/trusted.xml").read_text()
    assert 'target="ACCEPT"' in trusted and '<source address="10.42.0.0/16" />' in trusted


def test_file_owner_must_exist_in_the_image(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="user 'nobody' does not exist in the image"):
        write_file(tmp_path, FileSpec("/etc/x.conf", b"x", user="nobody"))


def _write_blueprint(build: Path, body: str, lock: dict[str, object] | None = None) -> None:
    directory = build / "blueprints"
    directory.mkdir(parents=True)
    (directory / "img.toml").write_text('name = "img"\nversion = "1.0.0"\n' + body)
    (directory / "img.x86_64.lock.json").write_text(json.dumps(lock or {"packages": []}))


def test_blueprint_file_outside_ostree_policy_names_field(tmp_path: Path) -> None:
    _write_blueprint(tmp_path, '[[customizations.files]]\npath = "/usr/bin/x"\ndata = "x"\n')
    with pytest.raises(InputError) as info:
        load_compose_inputs(tmp_path, "img", "x86_64")
    assert "customizations.files[0].path" in str(info.value)
    assert "/usr/local/bin" in str(info.value)


def test_unpinned_container_is_refused(tmp_path: Path) -> None:
    _write_blueprint(tmp_path, '[[containers]]\nsource = "quay.io/x/y:latest"\n')
    with pytest.raises(InputError, match=r"containers\[0\]\.source.*not pinned by digest"):
        load_compose_inputs(tmp_path, "img", "x86_64")


def test_lock_package_needs_a_location_and_sha256(tmp_path: Path) -> None:
    pkg = {"name": "a", "epoch": 0, "version": "1", "release": "1", "arch": "noarch",
           "sha256": "0" * 64, "repo": "nowhere", "location": "Packages/a.rpm"}
    _write_blueprint(tmp_path, "", {"packages": [pkg], "repos": {}})
    with pytest.raises(InputError, match=r"packages\[0\]\.location"):
        load_compose_inputs(tmp_path, "img", "x86_64")


def test_missing_blueprint_says_which_command_makes_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_compose_inputs(tmp_path, "microshift-full", "x86_64")
    assert "python -m builder blueprint --image microshift-full" in str(info.value)


def test_ostree_section_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"ostree\.base\.repo: .* is not an ostree repository"):
        parse_ostree({"base": {"repo": str(tmp_path), "ref": "rhel/9/x86_64/edge"}}, tmp_path)
    with pytest.raises(InputError, match=r"ostree\.deltas_from"):
        parse_ostree({"deltas_from": -1}, tmp_path)
    settings = parse_ostree({"base": {"repo": "https://example.invalid/repo",
                                      "ref": "rhel/9/x86_64/edge"}}, tmp_path)
    assert settings.base.kind == "url"


def test_ref_comes_from_release_then_profile_then_default() -> None:
    settings = parse_ostree({"ref": "fleet/{arch}/{image}"}, Path())
    assert settings.ref_for("aarch64", "img", "p/{arch}") == "fleet/aarch64/img"
    default = parse_ostree(None, Path())
    assert default.ref_for("x86_64", "img", "microshift/{arch}/{name}") == \
        "microshift/x86_64/img"
    assert default.ref_for("x86_64", "img") == "rhel/9/x86_64/edge"


def test_unknown_kill_stage_is_rejected() -> None:
    with pytest.raises(BuildError, match="unknown stage"):
        kill_at("nowhere")


def test_deltas_find_the_image_ref_before_any_blueprint_is_rendered(tmp_path: Path) -> None:
    from builder.blueprint.target import image_target
    from builder.context import Context

    ctx = Context(build_dir=tmp_path, release_path=RELEASE)
    # blueprints/profiles.yaml: ref "microshift/{arch}/{name}".
    assert image_target(ctx, "microshift-minimal").ref == "microshift/x86_64/microshift-minimal"


def test_lock_made_for_another_release_is_refused(tmp_path: Path) -> None:
    _write_blueprint(tmp_path, "", {"packages": [], "release": "4.14.3-1"})
    with pytest.raises(InputError, match=r"lock was made for release 4\.14\.3-1, release\.yaml "
                                         r"is 4\.14\.2-1"):
        load_compose_inputs(tmp_path, "img", "x86_64", "4.14.2-1")
