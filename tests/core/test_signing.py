"""Signing keys: the SAMPLE throwaway key and a release key named by id (real gpg)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from builder.core.errors import InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import (
    SAMPLE_PUBLIC_KEY,
    SigningKey,
    ensure_sample_key,
    resolve_key,
    stop_agent,
)

pytestmark = pytest.mark.integration
EPOCH = 1700000000


@pytest.fixture(scope="module")
def sample_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    home = tmp_path_factory.mktemp("signing") / "gpg"
    key = ensure_sample_key(Runner(), Progress(), home, EPOCH)
    yield key
    stop_agent(Runner(), key.homedir)


def test_sample_key_is_made_once_and_its_public_half_exported(sample_key: SigningKey) -> None:
    assert ensure_sample_key(Runner(), Progress(), sample_key.homedir, EPOCH) == sample_key
    public = (sample_key.homedir / SAMPLE_PUBLIC_KEY).read_text()
    assert public.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_unknown_key_is_an_input_error(sample_key: SigningKey) -> None:
    with pytest.raises(InputError, match=r"--gpg-key: no secret key 'nobody@example\.invalid'"):
        resolve_key(Runner(), sample_key.homedir, "nobody@example.invalid")
