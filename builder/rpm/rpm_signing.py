"""Signing what the RPM stage publishes: the RPMs (rpmsign) and repodata/repomd.xml.

Signatures over RPMs and repomd.xml carry a creation time; it is pinned (gpg
--faked-system-time) to the release's source_date_epoch, or to the key's creation time when
the key is younger, so signing the same bytes twice gives the same signed bytes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.signing import (
    SigningKey,
    gnupg_home,
    gpg,
    gpg_time,
    signature_epoch,
    stop_agent,
)


def sign_rpms(ctx: Context, rpms: list[Path], key: SigningKey) -> None:
    """Add an RSA/EdDSA header signature to each RPM with rpmsign.

    Each file is signed as a copy and renamed over the original: the RPMs in DIR/rpms are
    hard links into the step cache, which must keep the unsigned bytes it was keyed on.
    """
    gpg_path = shutil.which("gpg")
    if gpg_path is None:
        raise BuildError("gpg is not installed; it is needed to sign RPMs")
    epoch = signature_epoch(ctx.runner, key, ctx.release.source_date_epoch)
    extra = (f"--faked-system-time {gpg_time(epoch)}! --ignore-time-conflict "
             "--pinentry-mode loopback --passphrase ''")
    with ctx.progress.step(f"sign {len(rpms)} RPMs with {key.key_id[-16:]}"):
        for rpm in rpms:
            tmp = rpm.with_name(f".{rpm.name}.signing")
            shutil.copyfile(rpm, tmp)
            try:
                ctx.runner.run(["rpmsign", "--addsign", "--define", f"__gpg {gpg_path}",
                                "--define", f"_gpg_name {key.key_id}",
                                "--define", f"_gpg_path {gnupg_home(key.homedir)}",
                                "--define", f"_gpg_sign_cmd_extra_args {extra}", str(tmp)],
                               input=b"")
                os.replace(tmp, rpm)
            finally:
                tmp.unlink(missing_ok=True)
    stop_agent(ctx.runner, key.homedir)


def sign_repo(ctx: Context, repo_dir: Path, key: SigningKey) -> Path:
    """Write repodata/repomd.xml.asc, the detached signature dnf checks with repo_gpgcheck."""
    repomd = repo_dir / "repodata" / "repomd.xml"
    if not repomd.is_file():
        raise BuildError(f"{repo_dir} is not a yum repository (no repodata/repomd.xml)")
    epoch = signature_epoch(ctx.runner, key, ctx.release.source_date_epoch)
    signature = repomd.with_name("repomd.xml.asc")
    tmp = repomd.with_name(".repomd.xml.asc.tmp")
    tmp.unlink(missing_ok=True)
    gpg(ctx.runner, key.homedir, "--local-user", key.key_id, "--armor", "--detach-sign",
         "--output", str(tmp), str(repomd), epoch=epoch)
    os.replace(tmp, signature)
    stop_agent(ctx.runner, key.homedir)
    return signature
