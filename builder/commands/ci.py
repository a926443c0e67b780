"""`ci import-key`: the release signing key from a CI secret into a private GnuPG home.

    python -m builder ci import-key --from-env RELEASE_SIGNING_KEY --env-file "$GITHUB_ENV"

The secret (an ASCII-armored secret key, or the path of a file holding one, as GitLab's
file variables give) is read from the environment, never from the command line, imported
into a fresh GnuPG home (mode 0700) and never printed. The GnuPG home and the key's
fingerprint are appended to the env file as RELEASE_GNUPGHOME and RELEASE_KEY_ID, which the
later steps pass to --gpg-homedir/--gpg-key. Without the secret (a fork's pull request) it
says so and writes nothing, unless --required.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from builder.context import Context
from builder.core.errors import BuildError, InputError


def register(sub: Any) -> None:
    ci = sub.add_parser("ci", help="helpers for the CI templates (ci/templates/)")
    verbs = ci.add_subparsers(dest="ci_command", required=True, metavar="COMMAND")
    key = verbs.add_parser("import-key", help="import the release signing key from a CI "
                                              "secret into a temporary GnuPG home")
    key.add_argument("--from-env", default="RELEASE_SIGNING_KEY", metavar="VAR",
                     help="environment variable holding the key or a file path "
                          "(default RELEASE_SIGNING_KEY)")
    key.add_argument("--env-file", type=Path, required=True, metavar="FILE",
                     help="append RELEASE_GNUPGHOME=... and RELEASE_KEY_ID=... here "
                          "($GITHUB_ENV, or a dotenv file)")
    key.add_argument("--homedir", type=Path,
                     help="GnuPG home to create (default: a new directory under $RUNNER_TEMP "
                          "or the system's temporary directory)")
    key.add_argument("--required", action="store_true",
                     help="fail when the variable is empty (publishing jobs)")
    key.set_defaults(func=cmd_import_key)


def cmd_import_key(ctx: Context, args: argparse.Namespace) -> int:
    from builder.core.children import make_gnupg_home
    from builder.core.signing import import_secret_key

    secret = os.environ.get(args.from_env, "")
    if not secret.strip():
        if args.required:
            raise InputError(f"${args.from_env}", "", "is empty: this job signs what it "
                             "publishes and needs the release signing key",
                             hint="store it as a CI secret (GitHub: repository secret; "
                                  "GitLab: masked, protected file variable)")
        ctx.progress.info(f"${args.from_env} is empty: no release key; a SAMPLE release "
                          "signs with its throwaway key, others are not signed")
        return 0
    data = _key_bytes(secret, args.from_env)
    runner_temp = os.environ.get("RUNNER_TEMP")
    homedir = args.homedir or make_gnupg_home(
        "release-gnupg-", dir=Path(runner_temp) if runner_temp else None)
    fingerprint = import_secret_key(ctx.runner, homedir.resolve(), data)
    with args.env_file.open("a") as env:
        env.write(f"RELEASE_GNUPGHOME={homedir.resolve()}\nRELEASE_KEY_ID={fingerprint}\n")
    ctx.progress.info(f"release key {fingerprint} imported into {homedir.resolve()}")
    return 0


def _key_bytes(secret: str, variable: str) -> bytes:
    """The key itself, or the file a GitLab file variable points to."""
    if "-----BEGIN PGP" in secret:
        return secret.encode()
    path = Path(secret.strip())
    try:
        if len(secret) < 4096 and path.is_file():
            return path.read_bytes()
    except OSError as exc:
        raise BuildError(f"${variable} names a file that cannot be read: {exc}") from exc
    raise InputError(f"${variable}", "", "holds neither an ASCII-armored key nor the path of "
                     "a file with one", hint="gpg --armor --export-secret-keys KEYID")
