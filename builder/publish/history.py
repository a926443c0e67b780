"""`pull-published`: bring a ref's published history into DIR/ostree/repo before a compose.

A CI job starts from an empty build directory. Without the published commits a compose
would start a new history (no parent) and `deltas` would have nothing to make update deltas
from. This mirrors the ref's last N commits from the published repository (`ostree pull
--mirror --depth=N-1`), verifying their signatures with the release key when one is given,
so the next commit gets the published head as parent and deltas from each of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.context import Context
from builder.core.children import temporary_gnupg_home, tool_tmpdir
from builder.core.errors import BuildError, InputError, ToolError
from builder.core.ostree import Repo
from builder.core.signing import SigningKey, export_public_key, stop_agent

REMOTE = "published"


@dataclass(frozen=True)
class PullResult:
    ref: str
    head: str | None      # None: nothing published on the ref yet
    commits: int


def pull_published(ctx: Context, url: str, ref: str, depth: int,
                   key: SigningKey | None) -> PullResult:
    if not url.startswith(("http://", "https://", "file://")):
        raise InputError("command line", "--url", f"{url!r} is not an http(s):// or file:// URL "
                         "of a published ostree repository")
    if depth < 1:
        raise InputError("command line", "--depth", "must be 1 or more")
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    repo.init("archive")
    with ctx.progress.step(f"pull {ref} (last {depth} commits) from {url}"), \
            temporary_gnupg_home("release-key-") as scratch:
        args = ["--no-gpg-verify"]
        if key is not None:
            public = export_public_key(ctx.runner, key, scratch / "release.asc")
            stop_agent(ctx.runner, key.homedir)
            args = ["--set=gpg-verify=true", f"--set=gpgkeypath={public}"]
        else:
            ctx.progress.info("no release key given: the published commits are NOT verified")
        ctx.runner.run(["ostree", f"--repo={repo.path}", "remote", "add", "--force", *args,
                        REMOTE, url])
        try:
            # ostree verifies in a GnuPG home of its own under $TMPDIR: a recorded one.
            ctx.runner.run(["ostree", f"--repo={repo.path}", "pull", "--mirror",
                            f"--depth={depth - 1}", REMOTE, ref], env=tool_tmpdir(scratch))
        except ToolError as exc:
            if key is not None and "signature" in exc.stderr.lower():
                raise BuildError(f"{url}: the commits of {ref} do not verify with the release "
                                 f"key {key.key_id}: {exc.stderr.strip().splitlines()[-1]}",
                                 hint="give the key the published commits were signed with "
                                      "(the ref was not set)") from exc
            # A ref missing from the summary, or (no summary) its refs/heads file a 404.
            if "No such branch" not in exc.stderr and "HTTP 404" not in exc.stderr:
                raise
            ctx.progress.info(f"{url} has no {ref} yet: the next commit starts its history")
            return PullResult(ref, None, 0)
        finally:
            ctx.runner.run(["ostree", f"--repo={repo.path}", "remote", "delete",
                            "--if-exists", REMOTE], check=False)
        commits = repo.history(ref, depth)
        ctx.progress.info(f"{ref} = {commits[0]} ({len(commits)} commits)", ref=ref,
                          commit=commits[0])
    return PullResult(ref, commits[0], len(commits))
