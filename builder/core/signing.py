"""GPG signing of what the pipeline publishes: ostree commits and summaries, RPMs, repo metadata.

A key is named by its id (fingerprint preferred) in a GnuPG home directory. The sample flow
makes a throwaway key in DIR/gpg, labelled SAMPLE in its user id, with no passphrase; a
real release passes its own `--gpg-homedir` and `--gpg-key`.

Signatures over RPMs and repomd.xml carry a creation time; it is pinned (gpg
--faked-system-time) to the release's source_date_epoch, or to the key's creation time when
the key is younger, so signing the same bytes twice gives the same signed bytes.
ostree commit signatures live in detached metadata and never change the commit checksum.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from builder.core.children import make_gnupg_home
from builder.core.errors import BuildError, InputError, ToolError
from builder.core.progress import Progress
from builder.core.runner import Runner

SAMPLE_PUBLIC_KEY = "SAMPLE-signing-key.asc"  # in DIR/gpg/, what devices import
SAMPLE_UID = ("MicroShift edge builder SAMPLE signing key (throwaway) "
              "<sample-signing@example.invalid>")


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    homedir: Path

    def ostree_flags(self) -> list[str]:
        return [f"--gpg-sign={self.key_id}", f"--gpg-homedir={gnupg_home(self.homedir)}"]


# gpg-agent's sockets live in the GnuPG home, and a unix socket path has at most 107 bytes;
# gpg-agent refuses a home of 87 bytes (measured with gnupg 2.2.40), so keep a margin.
SOCKET_PATH_MAX = 80


def gnupg_home(homedir: Path) -> Path:
    """The path to hand gpg, rpmsign and ostree for `homedir`: itself, or where its path is
    too long for gpg-agent's sockets (a deep build directory), a short symlink to it in the
    temporary directory, named by the real path, so every tool finds the same agent."""
    real = homedir.absolute()
    if len(str(real)) <= SOCKET_PATH_MAX:
        return real
    digest = hashlib.sha256(str(real).encode()).hexdigest()[:16]
    alias = Path(tempfile.gettempdir()) / f"msb-gnupg-{os.getuid()}-{digest}"
    if not (alias.is_symlink() and os.readlink(alias) == str(real)):
        tmp = alias.with_name(f"{alias.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(real)
        os.replace(tmp, alias)
    return alias


def gpg(runner: Runner, homedir: Path, *args: str, epoch: int | None = None) -> str:
    argv = ["gpg", "--homedir", str(gnupg_home(homedir)), "--batch", "--no-tty",
            "--pinentry-mode",
            "loopback", "--passphrase", ""]
    if epoch is not None:
        # '!' freezes the clock; --ignore-time-conflict: the host clock may be past the epoch.
        argv += ["--faked-system-time", f"{gpg_time(epoch)}!", "--ignore-time-conflict"]
    return runner.output([*argv, *args])


def gpg_time(epoch: int) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(epoch))


def key_info(runner: Runner, homedir: Path, key_id: str) -> tuple[str, int]:
    """(fingerprint, creation time) of a secret key; a clear error when it is not there."""
    missing = InputError("command line", "--gpg-key",
                         f"no secret key {key_id!r} in GnuPG home {homedir}",
                         hint="list keys with `gpg --homedir DIR --list-secret-keys`")
    try:
        listing = _list_secret_keys(runner, homedir, key_id)
    except ToolError as exc:
        if any(answer in exc.stderr for answer in ABSENT):
            raise missing from exc
        reason = (exc.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise BuildError(f"gpg could not list the keys in GnuPG home {homedir}: {reason}"
                         ) from exc
    created, fingerprint = 0, ""
    for line in listing.splitlines():
        fields = line.split(":")
        if fields[0] == "sec" and not created:
            created = int(fields[5] or 0)
        elif fields[0] == "fpr" and not fingerprint:
            fingerprint = fields[9]
    if not fingerprint:
        raise missing
    return fingerprint, created


# What gpg says when the key is not there. Anything else is gpg's own trouble, which
# the error repeats: it is not the user's key that is wrong.
ABSENT = ("No secret key", "No public key")
# gpg-agent starts on first use, and a gpg that cannot reach it lists no keys at all. A
# suite run beside a build and two mutation runs once failed to find the SAMPLE key in a
# home that held it (gpg's reason was not kept then); an agent that did not come up is
# worth another try, a key that is not there is not.
AGENT_TROUBLE = ("No agent running", "can't connect to the agent")
AGENT_ATTEMPTS = 3


def _list_secret_keys(runner: Runner, homedir: Path, key_id: str) -> str:
    argv = ("--with-colons", "--list-secret-keys", key_id)
    for wait in range(1, AGENT_ATTEMPTS):
        try:
            return gpg(runner, homedir, *argv)
        except ToolError as exc:
            if not any(trouble in exc.stderr for trouble in AGENT_TROUBLE):
                raise
        stop_agent(runner, homedir)
        time.sleep(wait)
    return gpg(runner, homedir, *argv)


def resolve_key(runner: Runner, homedir: Path, key_id: str) -> SigningKey:
    fingerprint, _ = key_info(runner, homedir, key_id)
    return SigningKey(fingerprint, homedir)


def release_signing_key(runner: Runner, progress: Progress, homedir: Path | None,
                        key_id: str | None, *, sample_home: Path | None,
                        epoch: int) -> SigningKey | None:
    """The key commits, summaries, RPMs and repodata are signed with.

    An explicit key wins; with none, a release on the SAMPLE base (`sample_home` is where its
    throwaway key lives) signs with the SAMPLE key, so the demo exercises verification end to
    end, and a production release is left unsigned, which is said out loud.
    """
    if (homedir is None) != (key_id is None):
        raise InputError("command line", "--gpg-homedir/--gpg-key", "give both or neither")
    if homedir is not None and key_id is not None:
        return resolve_key(runner, homedir.resolve(), key_id)
    if sample_home is not None:
        return ensure_sample_key(runner, progress, sample_home, epoch)
    progress.info("no signing key given (--gpg-homedir/--gpg-key): NOT signing")
    return None


def ensure_sample_key(runner: Runner, progress: Progress, homedir: Path,
                      epoch: int) -> SigningKey:
    """The throwaway SAMPLE key in `homedir` (DIR/gpg), created once, dated at `epoch`."""
    if (homedir / "pubring.kbx").is_file():
        try:
            return resolve_key(runner, homedir, SAMPLE_UID)
        except InputError:
            pass
    # Build the keyring next to its final place and rename it in: a crash leaves no
    # half-made homedir that a later run would trust.
    homedir.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_gnupg_home(".gpg-", dir=homedir.parent)  # recorded: its agent is ours
    try:
        gpg(runner, tmp, "--quick-gen-key", SAMPLE_UID, "rsa3072", "sign", "never",
             epoch=epoch)
        stop_agent(runner, tmp)
        if homedir.exists():
            shutil.rmtree(homedir)
        os.replace(tmp, homedir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    key = resolve_key(runner, homedir, SAMPLE_UID)
    export_public_key(runner, key, homedir / SAMPLE_PUBLIC_KEY)
    progress.info(f"created the SAMPLE signing key {key.key_id} in {homedir} (throwaway, "
                      "no passphrase; use --gpg-homedir/--gpg-key for a real release)")
    return key


def export_public_key(runner: Runner, key: SigningKey, dest: Path) -> Path:
    armored = gpg(runner, key.homedir, "--armor", "--export", key.key_id)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(armored)
    os.replace(tmp, dest)
    return dest


def sign_detached(runner: Runner, key: SigningKey, path: Path, epoch: int | None = None) -> Path:
    """PATH.sig: a binary detached signature of the file (compact: devices fetch it)."""
    dest = path.with_name(path.name + ".sig")
    tmp = path.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    gpg(runner, key.homedir, "--local-user", key.key_id, "--detach-sign", "--output",
        str(tmp), str(path), epoch=epoch)
    os.replace(tmp, dest)
    return dest


def stop_agent(runner: Runner, homedir: Path) -> None:
    """gpg starts an agent per homedir; stop ours so no process outlives the build."""
    runner.run(["gpgconf", "--homedir", str(gnupg_home(homedir)), "--kill", "gpg-agent"],
               check=False)


def signature_epoch(runner: Runner, key: SigningKey, source_date_epoch: int) -> int:
    _, created = key_info(runner, key.homedir, key.key_id)
    return max(source_date_epoch, created)


def import_secret_key(runner: Runner, homedir: Path, armored: bytes) -> str:
    """Import one secret key (ASCII-armored or binary) into `homedir`; its fingerprint.

    gpg's output is captured and never shown: CI logs must not carry key material, and
    a failed import names no more than that it failed."""
    homedir.mkdir(parents=True, exist_ok=True)
    homedir.chmod(0o700)
    home = str(gnupg_home(homedir))
    proc = runner.run(["gpg", "--homedir", home, "--batch", "--no-tty",
                       "--pinentry-mode", "loopback", "--passphrase", "", "--import"],
                      input=armored, check=False)
    listing = runner.run(["gpg", "--homedir", home, "--batch", "--with-colons",
                          "--list-secret-keys"], check=False).stdout.decode()
    stop_agent(runner, homedir)
    fingerprints = [line.split(":")[9] for line in listing.splitlines()
                    if line.startswith("fpr:")]
    keys = [line for line in listing.splitlines() if line.startswith("sec:")]
    if proc.returncode != 0 or not keys:
        raise BuildError("the release signing key could not be imported (gpg's output is "
                         "not shown, so no key material reaches the log)",
                         hint="store an ASCII-armored secret key without passphrase "
                              "(gpg --armor --export-secret-keys KEYID) in the secret")
    if len(keys) != 1:
        raise BuildError(f"the secret holds {len(keys)} secret keys; give exactly one")
    return fingerprints[0]
