"""Kickstarts: every rendered variant passes pykickstart (RHEL 9); the pull secret is never
logged; the storage profile leaves free space in the volume group; errors name their source."""

from __future__ import annotations

import itertools
import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pykickstart.constants import KS_SCRIPT_PRE, SELINUX_ENFORCING
from pykickstart.parser import KickstartParser
from pykickstart.version import RHEL9, makeVersion

from builder.core.errors import BuildError, InputError
from builder.installer.kickstart import (
    DATA_MEDIA_URL,
    EMBEDDED_REPO_URL,
    KickstartContext,
    load_image_facts,
    render,
    validate,
)
from tests.installer.support import SECRET_TOKEN, make_pull_secret, write_blueprints
from tests.support.cli import RELEASE, run_cli

REF = "rhel/9/x86_64/edge"
# Only the armour lines are checked when rendering; this is not a real key (test stand-in).
FAKE_ARMORED_KEY = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQENBFtest-stand-in\n"
                    "-----END PGP PUBLIC KEY BLOCK-----\n")


def make_gpg_key(directory: Path) -> Path:
    path = directory / "key.asc"
    path.write_text(FAKE_ARMORED_KEY)
    return path


@pytest.fixture
def pull_secret(tmp_path: Path) -> Path:
    return make_pull_secret(tmp_path)


@pytest.fixture
def gpg_key(tmp_path: Path) -> Path:
    return make_gpg_key(tmp_path)


def context(**overrides: Any) -> KickstartContext:
    fields: dict[str, Any] = {
        "image": "microshift-full", "install_url": "http://updates.example.com/repo",
        "ref": REF, "update_url": "http://updates.example.com/repo",
        "microshift_config": "dns:\n  baseDomain: example.com\n"}
    fields.update(overrides)
    return KickstartContext(**fields)


def parse(text: str) -> Any:
    handler = makeVersion(RHEL9)
    KickstartParser(handler).readKickstartFromString(text)
    return handler


def secret_scripts(handler: Any) -> list[Any]:
    return [s for s in handler.scripts if SECRET_TOKEN in s.script]


# --- every variant validates ------------------------------------------------------------
OPTIONS = list(itertools.product([True, False], repeat=3))


@pytest.mark.parametrize("variant", ["network", "embedded"])
@pytest.mark.parametrize(("storage", "with_secret", "signed"), OPTIONS,
                         ids=[f"storage={a}-secret={b}-signed={c}" for a, b, c in OPTIONS])
def test_every_variant_passes_pykickstart(variant: str, storage: bool, with_secret: bool,
                                          signed: bool, tmp_path: Path) -> None:
    pull_secret = make_pull_secret(tmp_path)
    gpg_key = make_gpg_key(tmp_path)
    install_url = EMBEDDED_REPO_URL if variant == "embedded" else "http://u.example.com/repo"
    ks = context(install_url=install_url, storage=storage,
                 pull_secret=pull_secret if with_secret else None,
                 gpg_verify=signed, gpg_key=gpg_key if signed else None)
    text = render(variant, ks)
    validate(text)  # pykickstart, RHEL 9 syntax, warnings as errors
    handler = parse(text)
    assert handler.ostreesetup.url == install_url
    assert handler.ostreesetup.ref == REF
    assert handler.ostreesetup.osname == "rhel"
    assert handler.ostreesetup.nogpg is not signed
    assert bool(secret_scripts(handler)) is with_secret


@pytest.mark.parametrize("variant", ["network", "embedded"])
def test_installed_system_runs_selinux_enforcing(variant: str) -> None:
    handler = parse(render(variant, context(install_url=EMBEDDED_REPO_URL)))
    assert handler.selinux.selinux == SELINUX_ENFORCING


def test_embedded_variant_installs_from_the_iso_repo() -> None:
    handler = parse(render("embedded", context(install_url=EMBEDDED_REPO_URL)))
    assert handler.ostreesetup.url == "file:///run/install/repo/ostree/repo"


def test_embedded_variant_on_a_data_iso_mounts_it_by_label() -> None:
    text = render("embedded", context(install_url=DATA_MEDIA_URL, media_label="MICROSHIFT-X"))
    handler = parse(text)
    assert handler.ostreesetup.url == "file:///run/install/microshift/ostree/repo"
    (pre,) = [s for s in handler.scripts if "/dev/disk/by-label/MICROSHIFT-X" in s.script]
    assert pre.type == KS_SCRIPT_PRE
    assert "mount -o ro /dev/disk/by-label/MICROSHIFT-X /run/install/microshift" in pre.script


# --- partitioning -----------------------------------------------------------------------
def test_storage_profile_leaves_free_space_in_the_volume_group() -> None:
    handler = parse(render("network", context(storage=True, root_size_mib=10240)))
    (vg,) = handler.volgroup.dataList()
    assert vg.vgname == "rhel"
    pv = next(p for p in handler.partition.dataList() if p.mountpoint == vg.physvols[0])
    assert pv.grow, "the physical volume must take the rest of the disk"
    (root,) = handler.logvol.dataList()
    assert (root.mountpoint, root.size, root.vgname) == ("/", 10240, "rhel")
    # Fixed-size root, nothing that grows into the free extents TopoLVM needs.
    assert not root.grow and not root.percent
    assert handler.reqpart.addBoot


def test_storage_profile_points_topolvm_at_the_volume_group() -> None:
    text = render("network", context(storage=True, volume_group="edge"))
    assert "volume-group: edge" in text
    assert "--vgname=edge" in text


def test_without_storage_the_disk_is_one_plain_root() -> None:
    handler = parse(render("network", context(storage=False)))
    assert not handler.volgroup.dataList()
    assert not handler.logvol.dataList()
    root = next(p for p in handler.partition.dataList() if p.mountpoint == "/")
    assert root.grow
    assert "lvmd.yaml" not in render("network", context(storage=False))


# --- post-install -----------------------------------------------------------------------
def test_post_install_sets_remote_config_greenboot_and_firewall() -> None:
    text = render("embedded", context(install_url=EMBEDDED_REPO_URL,
                                      update_url="https://updates.example.com/repo",
                                      greenboot_max_boot_attempts=5))
    assert "ostree remote add --set=gpg-verify=false edge https://updates.example.com/repo " \
           f"{REF}" in text
    assert "baseDomain: example.com" in text
    assert "GREENBOOT_MAX_BOOT_ATTEMPTS=5" in text
    assert "firewall-offline-cmd --zone=trusted --add-source=10.42.0.0/16" in text
    assert "firewall-offline-cmd --zone=trusted --add-source=169.254.169.1" in text
    assert "firewall-offline-cmd --zone=trusted --add-source=fd01::/48" in text
    assert "firewall-offline-cmd --zone=public --add-port=5353/udp" in text
    # greenboot's rules: a login never marks a boot healthy; failed boots keep their logs.
    assert "ln -sf /dev/null /etc/systemd/user/grub-boot-success.timer" in text
    assert "mkdir -p /var/log/journal" in text
    assert "systemctl enable greenboot-healthcheck.service" in text


def test_signed_commit_verifies_with_the_given_key(gpg_key: Path) -> None:
    text = render("network", context(gpg_verify=True, gpg_key=gpg_key))
    assert "--nogpg" not in text
    assert ("--set=gpg-verify=true --set=gpg-verify-summary=true "
            "--set=gpgkeypath=/etc/pki/ostree/edge.gpg") in text
    handler = parse(text)
    pre = [s for s in handler.scripts if "trusted.gpg.d" in s.script]
    assert pre and "mQENBFtest-stand-in" in pre[0].script


def test_embedded_without_update_url_keeps_no_stale_remote() -> None:
    text = render("embedded", context(install_url=EMBEDDED_REPO_URL, update_url=None))
    commands = [line.strip() for line in text.splitlines() if not line.startswith("#")]
    assert "ostree remote delete --if-exists edge" in commands
    assert not [c for c in commands if c.startswith("ostree remote add")]


# --- the pull secret --------------------------------------------------------------------
def test_pull_secret_is_written_mode_600_in_an_unlogged_silent_section(
        pull_secret: Path) -> None:
    text = render("network", context(pull_secret=pull_secret))
    handler = parse(text)
    (script,) = secret_scripts(handler)
    assert script.logfile is None
    assert "/etc/crio/openshift-pull-secret" in script.script
    assert "chmod 600 /etc/crio/openshift-pull-secret" in script.script
    for line in script.script.splitlines():
        assert not line.strip().startswith(("set -x", "echo", "printf", "tee")), line
    # Exactly once in the whole file: in the here-document, nowhere else.
    assert text.count(SECRET_TOKEN) == 1
    secret_line = next(line for line in text.splitlines() if SECRET_TOKEN in line)
    assert secret_line.startswith("{") and "--log" not in secret_line
    # Anaconda is told not to copy the input kickstart (which holds it) onto the device.
    assert any("/tmp/NOSAVE_INPUT_KS" in s.script and not s.inChroot for s in handler.scripts)


def test_a_template_that_logs_the_secret_is_refused(tmp_path: Path,
                                                    pull_secret: Path) -> None:
    (tmp_path / "leaky.ks.j2").write_text(
        "ostreesetup --osname=rhel --url={{ ks.install_url }} --ref={{ ks.ref }} --nogpg\n"
        "%post --log=/var/log/post.log\n"
        "echo '{{ secret }}' > /etc/crio/openshift-pull-secret\n"
        "%end\n")
    with pytest.raises(BuildError, match="logs or traces"):
        render("leaky.ks.j2", context(pull_secret=pull_secret), search_path=tmp_path)


def test_a_bad_pull_secret_is_named_but_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    path.write_text(f"not json {SECRET_TOKEN}")
    with pytest.raises(InputError) as err:
        render("network", context(pull_secret=path))
    assert str(path) in str(err.value)
    assert SECRET_TOKEN not in str(err.value)
    path.write_text(json.dumps({"registry": SECRET_TOKEN}))
    with pytest.raises(InputError, match="a pull secret is a JSON object with an 'auths' "
                                          "mapping of registry credentials") as err:
        render("network", context(pull_secret=path))
    assert SECRET_TOKEN not in str(err.value)


# --- errors name the template and the line ----------------------------------------------
def test_template_syntax_error_names_template_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.ks.j2").write_text("text\nreboot\n{% if ks.storage %}\nzerombr\n")
    with pytest.raises(BuildError, match=r"broken\.ks\.j2:\d+: template error"):
        render("broken.ks.j2", context(), search_path=tmp_path)


def test_template_undefined_value_names_template_and_line(tmp_path: Path) -> None:
    (tmp_path / "typo.ks.j2").write_text("text\nreboot\ntimezone {{ ks.time_zone }}\n")
    with pytest.raises(BuildError, match=r"typo\.ks\.j2:3: template error: .*time_zone"):
        render("typo.ks.j2", context(), search_path=tmp_path)


def test_invalid_kickstart_names_template_and_rendered_line(tmp_path: Path) -> None:
    (tmp_path / "bad.ks.j2").write_text(
        "text\nostreesetup --osname=rhel --url={{ ks.install_url }} --ref={{ ks.ref }}\n"
        "partition / --size=nonsense\n")
    with pytest.raises(BuildError) as err:
        render("bad.ks.j2", context(), search_path=tmp_path)
    message = str(err.value)
    assert "bad.ks.j2" in message and "line 3" in message and "--size=nonsense" in message


def test_validate_rejects_a_kickstart_without_ostreesetup() -> None:
    with pytest.raises(BuildError, match="no ostreesetup"):
        validate("text\nreboot\n", source="hand-written.ks")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("install_url", "http://host/repo with space", "install_url: .*not a usable URL"),
    ("ref", "rhel//edge", "ref: .*not an ostree ref"),
    ("trusted_sources", ("10.42.0.0/33",), "trusted_sources: .*not an address"),
    ("greenboot_max_boot_attempts", 0, "greenboot_max_boot_attempts: .*out of range"),
    ("microshift_config", "a: 1\n%post\n", "microshift_config: line 2 .*section header"),
    ("microshift_config", "a: 1\nMICROSHIFT_CONFIG_EOF\n", "microshift_config: .*delimiter"),
    ("ssh_key", 'ssh-ed25519 AAAA "x"', "ssh_key: .*without quotes"),
    ("gpg_verify", True, "gpg_key: the commit is signed but no public key"),
    ("media_label", "MICROSHIFT", "media_label: .*needs install_url"),
])
def test_bad_context_values_are_refused(field: str, value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        replace(context(), **{field: value})


# --- facts from the image's blueprint ----------------------------------------------------
def test_image_facts_come_from_the_rendered_blueprint(tmp_path: Path) -> None:
    write_blueprints(tmp_path, "microshift-full", "microshift-minimal")
    full = load_image_facts(tmp_path / "blueprints/microshift-full.toml", "microshift-full")
    assert full.storage
    assert full.trusted_sources == ("10.42.0.0/16", "fd01::/48", "169.254.169.1")
    assert "5353:udp" in full.firewall_ports and "6443:tcp" in full.firewall_ports
    assert full.max_boot_attempts == 3
    assert full.microshift_config and "baseDomain" in full.microshift_config
    minimal = load_image_facts(tmp_path / "blueprints/microshift-minimal.toml",
                               "microshift-minimal")
    assert not minimal.storage
    assert minimal.trusted_sources == ("10.42.0.0/16", "fd01::/48")


# --- the command ------------------------------------------------------------------------
def test_kickstart_command_writes_private_file_when_it_holds_a_secret(
        tmp_path: Path, pull_secret: Path) -> None:
    write_blueprints(tmp_path, "microshift-full")
    rc = run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path,
                 "--image", "microshift-full", "--url", "http://updates.example.com/repo",
                 "--pull-secret", pull_secret)
    assert rc == 0
    out = tmp_path / "kickstart/microshift-full-network.ks"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    handler = parse(out.read_text())
    assert handler.ostreesetup.url == "http://updates.example.com/repo"
    assert handler.logvol.dataList(), "microshift-full has TopoLVM: LVM layout expected"


def test_kickstart_command_embedded_variant(tmp_path: Path) -> None:
    write_blueprints(tmp_path, "microshift-minimal")
    rc = run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path,
                 "--image", "microshift-minimal", "--embedded")
    assert rc == 0
    out = tmp_path / "kickstart/microshift-minimal-embedded.ks"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert parse(out.read_text()).ostreesetup.url == EMBEDDED_REPO_URL


def test_kickstart_command_storage_flag_overrides_the_blueprint(tmp_path: Path) -> None:
    write_blueprints(tmp_path, "microshift-minimal")
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path, "--image",
                   "microshift-minimal", "--embedded", "--storage") == 0
    text = (tmp_path / "kickstart/microshift-minimal-embedded.ks").read_text()
    assert parse(text).volgroup.dataList()


def test_kickstart_command_errors_write_nothing(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path,
                   "--image", "no-such-image", "--embedded") == 2
    # The image's target (its ref) is worked out first: an unknown image names the known.
    assert "images: no image named 'no-such-image'; allowed: microshift-full" in \
        capsys.readouterr().err
    write_blueprints(tmp_path, "microshift-full")
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path,
                   "--image", "microshift-full") == 2
    assert "command line: --url: the network kickstart installs from an ostree repo on a " \
           "server" in capsys.readouterr().err
    assert not (tmp_path / "kickstart").exists()


def test_the_secret_reaches_no_output_even_with_debug(
        tmp_path: Path, pull_secret: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    write_blueprints(tmp_path, "microshift-full")
    caplog.set_level("DEBUG")
    assert run_cli("--debug", "--release", RELEASE, "kickstart", "--build-dir", tmp_path,
                   "--image", "microshift-full", "--url", "http://updates.example.com/repo",
                   "--pull-secret", pull_secret) == 0
    captured = capsys.readouterr()
    assert SECRET_TOKEN not in captured.out + captured.err + caplog.text


@pytest.mark.parametrize(("config", "field"), [
    ("vm\n", "(top level)"),
    ("network:\n  clusterNetwork: [10.42.0.0/16]\n  serviceNetwork: [10.42.0.0/16]\n",
     "network"),
    ("colour: blue\n", "colour"),
])
def test_microshift_config_is_checked_before_it_reaches_a_kickstart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, field: str) -> None:
    write_blueprints(tmp_path, "microshift-minimal")
    bad = tmp_path / "config.yaml"
    bad.write_text(config)
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path, "--image",
                   "microshift-minimal", "--embedded", "--microshift-config", bad) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {field}" in err and "Traceback" not in err
    assert not (tmp_path / "kickstart").exists()


def test_the_container_kickstart_installs_the_signed_bootc_image(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Image mode: ostreecontainer names the image by digest; the installer and the device
    get the policy that accepts only the release's signed images, and where the signatures
    are; pykickstart (RHEL 9) accepts it."""
    write_blueprints(tmp_path, "microshift-full")
    key = tmp_path / "release.asc"
    key.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\nAAAA\n"
                   "-----END PGP PUBLIC KEY BLOCK-----\n")
    image = "registry.example.com:5000/microshift/microshift-full@sha256:" + "a" * 64
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path, "--image",
                   "microshift-full", "--container", image, "--gpg-key", key,
                   "--lookaside", "https://updates.example.com/sigstore") == 0
    text = (tmp_path / "kickstart/microshift-full-container.ks").read_text()
    assert f"ostreecontainer --url={image} --transport=registry --stateroot=rhel\n" in text
    assert text.count('"registry.example.com:5000/microshift": [{"type": "signedBy"') == 2
    assert text.count("lookaside: https://updates.example.com/sigstore") == 2
    assert "ostreesetup" not in text
    assert run_cli("--release", RELEASE, "kickstart", "--build-dir", tmp_path, "--image",
                   "microshift-full", "--container", "not a reference") == 2
    assert "container: 'not a reference' is not an image reference" in capsys.readouterr().err
