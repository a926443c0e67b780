"""Kickstart options as users type them (`--url`, `--update-url`, `--ssh-key`, `--timezone`,
the MicroShift config, the pull secret file): every value either renders into a kickstart that
pykickstart accepts, with the value confined to the line or here-document it belongs in, or
is refused as one InputError naming the option; never a traceback, never a kickstart section
smuggled in through a value."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.core.errors import BuildError, InputError
from builder.installer.kickstart import KickstartContext, read_pull_secret, render, validate
from tests.support.mutations import TRICKS

REF = "microshift/x86_64/microshift-full"
SECRET = b"c2VjcmV0LXRva2Vu"
BASE: dict[str, Any] = {
    "image": "microshift-full", "install_url": "http://updates.example.com/repo", "ref": REF,
    "update_url": "http://updates.example.com/repo",
    "microshift_config": "dns:\n  baseDomain: example.com\n"}
NASTY = st.one_of(
    st.text(max_size=40), st.sampled_from(TRICKS),
    st.sampled_from(["http://x/\n%pre\nrm -rf /\n%end", "http://a b", "http://x/'$(id)'",
                     "file:///repo", "https://h:8443/r?x=1", "%post", "EOF\n%pre",
                     "MICROSHIFT_CONFIG_EOF", "ssh-ed25519 AAAA x@y", "Europe/Paris"]))
FIELDS = ("install_url", "update_url", "ssh_key", "timezone", "image", "ref",
          "microshift_config", "admin_user", "osname", "remote", "volume_group")


@pytest.mark.fuzz
@given(field=st.sampled_from(FIELDS), value=NASTY, variant=st.sampled_from(["network"]))
def test_every_option_value_renders_a_valid_kickstart_or_is_refused(
        field: str, value: str, variant: str) -> None:
    try:
        ks = KickstartContext(**{**BASE, field: value})
    except InputError as exc:
        assert exc.field == field and "\n" not in str(exc), str(exc)
        return
    text = render(variant, ks)
    validate(text, source=variant)  # raises on anything pykickstart would not take
    sections = [line for line in text.splitlines() if line.startswith("%")]
    clean = render(variant, KickstartContext(**BASE))
    assert sections == [line for line in clean.splitlines() if line.startswith("%")], \
        "a value added or removed a kickstart section"


@pytest.mark.fuzz
@given(before=st.one_of(st.binary(max_size=32), st.sampled_from(
    [b'{"auths": {"r": {"auth": "', b'{"auths": [', b"[", b"\xff\xfe{", b"", b'{"x": "'])),
       after=st.one_of(st.binary(max_size=32), st.sampled_from(
    [b'"}}}', b'"]}', b'"}', b'", "y": "%end\\n%pre"}', b""])))
def test_a_pull_secret_is_one_line_of_json_or_refused_naming_the_file(before: bytes,
                                                                      after: bytes) -> None:
    content = before + SECRET + after
    path = Path(tempfile.mkdtemp(prefix="secret-")) / "pull-secret.json"
    path.write_bytes(content)
    try:
        secret = read_pull_secret(path)
    except InputError as exc:
        assert exc.path == str(path) and "\n" not in str(exc), str(exc)
        assert SECRET.decode() not in str(exc), "the secret is never echoed"
        return
    assert "\n" not in secret


def test_a_value_that_is_refused_is_named_not_rendered() -> None:
    with pytest.raises(InputError, match="install_url"):
        KickstartContext(**{**BASE, "install_url": "http://x/\n%pre\nrm -rf /\n%end"})
    with pytest.raises(BuildError):
        validate("%pre\n", source="handwritten")
