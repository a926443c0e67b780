"""What the CLI layer decides itself: a bad argument is one line naming it, exit 2, checked
before the build directory is looked at or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import RELEASE, run_cli


@pytest.mark.parametrize(("argv", "words"), [
    (["deltas", "--index-validity", "0"], "--index-validity: 0 is out of range"),
    (["deltas", "--index-validity", "400"], "--index-validity: 400 is out of range"),
    (["deltas", "--from-count", "-1"], "--from-count: must be 0 or more"),
    (["deltas", "--jobs", "0"], "--jobs: must be 1 or more"),
    (["deltas", "--memory-limit", "lots"], "--memory-limit: "),
    (["deltas", "--delta-cache-size", "0"], "--delta-cache-size: '0' must be more than 0"),
    (["deltas", "--image", "no-such-image"], "no image named 'no-such-image'"),
    (["build-image", "--image", "microshift-full", "--image", "nope"], "no image named 'nope'"),
    (["build-image", "--delta-cache-size", "lots"], "--delta-cache-size: "),
    (["build-image", "--push", "localhost"], "--push: 'localhost' is not REGISTRY/NAMESPACE"),
    (["bootc", "--push", "quay.io/"], "--push: 'quay.io/' is not REGISTRY/NAMESPACE"),
    (["publish", "--to", "/nonexistent/target", "--index-validity", "-1"],
     "--index-validity: -1 is out of range"),
    (["disk", "--image", "microshift-minimal", "--firmware", "bios", "--secure-boot"],
     "--secure-boot: is for --firmware uefi"),
    (["disk", "--image", "microshift-minimal", "--from-image", "ftp://x/y"],
     "--from-image: 'ftp://x/y' is not an image source; allowed: nothing"),
    (["disk", "--image", "microshift-minimal", "--reference", "quay.io/a/b"],
     "--reference: belongs to --from-image"),
    (["disk", "--image", "microshift-minimal", "--from-image", "--policy", "/etc/passwd"],
     "--policy: is for a pull: --from-image docker://REFERENCE"),
    (["disk", "--image", "microshift-minimal", "--from-image", "docker://quay.io/a/b",
      "--reference", "nope"], "--reference: 'nope' is not a registry reference"),
    (["disk", "--image", "microshift-minimal", "--from-image", "docker://quay.io/a/b",
      "--lookaside", "site"], "--lookaside: 'site' is not a URL"),
    (["disk", "--image", "microshift-minimal", "--from-image"],
     "no bootc image of microshift-minimal for x86_64"),
    (["device", "simulate", "--vm", "--scenario", "bad-update", "--firmware", "bios",
      "--secure-boot"], "--secure-boot: is for --firmware uefi"),
    (["--arch", "ppc64le", "device", "simulate", "--vm", "--scenario", "good-update"],
     "--arch: the VM scenarios boot x86_64 or aarch64; ppc64le stays on the simulated"),
    (["--arch", "aarch64", "device", "simulate", "--vm", "--scenario", "bad-update",
      "--firmware", "bios"], "--firmware: an aarch64 VM boots through UEFI only"),
    (["device", "simulate", "--scenario", "migrate"],
     "--scenario: 'migrate' runs in a VM only (add --vm)"),
    (["device", "simulate", "--vm", "--scenario", "migrate", "--mode", "image"],
     "--mode: migrate starts on an ostree device"),
    (["--arch", "aarch64", "device", "simulate", "--vm", "--scenario", "migrate"],
     "--mode: is for x86_64 VMs"),
])
def test_a_bad_argument_is_one_line_and_exit_2_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        words: str) -> None:
    build = tmp_path / "build"
    assert run_cli("--release", RELEASE, *argv, "--build-dir", build) == 2
    err = capsys.readouterr().err
    assert words in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == \
        [next(line for line in err.splitlines() if line.startswith("error:"))]
    assert not build.exists() or not any(build.iterdir())


def test_kickstart_and_installer_share_their_options() -> None:
    """One module registers both: the same media options, each with its own flag."""
    from builder.cli import build_parser

    parser = build_parser()
    kick = parser.parse_args(["kickstart", "--image", "x", "--embedded", "--storage"])
    inst = parser.parse_args(["installer", "--image", "x", "--boot-iso", "b.iso"])
    assert (kick.embedded, kick.storage, kick.image) == (True, True, "x")
    assert (inst.boot_iso, inst.storage, inst.image) == (Path("b.iso"), None, "x")
    with pytest.raises(SystemExit):
        parser.parse_args(["kickstart", "--image", "x", "--boot-iso", "b.iso"])


def test_deltas_and_build_image_take_the_matrix_of_images() -> None:
    """--image repeated or --all-images (every profile, in profiles.yaml's order), the
    generator and the part cache's size."""
    from builder.blueprint.render import load_profiles
    from builder.cli import build_parser
    from builder.commands.options import delta_cache_limit, selected_images

    parser = build_parser()
    every = parser.parse_args(["deltas", "--all-images"])
    assert every.images is None and selected_images(every) == list(load_profiles())
    two = parser.parse_args(["build-image", "--image", "microshift-minimal", "--image",
                             "microshift-full", "--image", "microshift-minimal",
                             "--delta-generator", "ostree", "--delta-cache-size", "2G"])
    assert selected_images(two) == ["microshift-minimal", "microshift-full"]
    assert (two.delta_generator, delta_cache_limit(two)) == ("ostree", 2 << 30)
    default = parser.parse_args(["deltas"])
    assert selected_images(default) == ["microshift-full"]
    assert (default.delta_generator, delta_cache_limit(default)) == ("builder", None)
    with pytest.raises(SystemExit):
        parser.parse_args(["deltas", "--all-images", "--ref", "a/b"])
