"""A release engineer's signing key, for tests that sign with a key of their own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder.core.signing import SigningKey


def make_release_key(homedir: Path) -> str:
    """A passphrase-less ed25519 key standing in for a release engineer's signing key."""
    homedir.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(homedir), "--batch", "--pinentry-mode", "loopback",
                    "--passphrase", "", "--quick-gen-key", "Release Test <release@example.invalid>",
                    "ed25519", "sign", "never"], check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--homedir", str(homedir), "--with-colons",
                              "--list-secret-keys"], check=True, capture_output=True,
                             text=True).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


ReleaseKey = tuple[SigningKey, Path]  # the signing key and its exported public key
