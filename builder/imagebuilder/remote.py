"""Drive a remote Image Builder (osbuild-composer): check, push, depsolve, compose, wait, fetch.

This is the "remote backend" of the design: the same rendered blueprint the local backend
uses is sent to the service, and the service's commit is published into DIR/ostree/repo as
this release's commit, chained to the previous one, so everything downstream (static deltas,
reports, kickstarts, installer ISOs) works as after a local compose. The HTTP details live in
builder.imagebuilder.client, the request in request.py, the blueprint handling in blueprints.py,
the publishing in results.py and importer.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.core.build_layout import Layout
from builder.core.errors import InputError
from builder.core.ostree import Repo
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.imagebuilder.blueprints import (
    Blueprint,
    check_for_release,
    installer_view,
    left_out,
    load_blueprint,
    sync_blueprint,
)
from builder.imagebuilder.request import ComposeOptions, choose_image_type
from builder.imagebuilder.results import ComposeResult, Target, fetch_result, write_record
from builder.imagebuilder.wait import WaitOptions, wait_for_compose
from builder.release.model import Release

if TYPE_CHECKING:
    from builder.imagebuilder.client import WeldrClient


@dataclass(frozen=True)
class ComposeJob:
    build_dir: Path
    image: str
    release: Release
    options: ComposeOptions
    wait: WaitOptions = field(default_factory=WaitOptions)
    key: SigningKey | None = None
    # HOST:PORT at which to serve DIR/ostree/repo to the workers during the compose.
    serve: str | None = None

    def target(self) -> Target:
        return Target(self.build_dir, self.image, self.release, self.key, self.options.ref)


def describe_package(pkg: dict[str, Any]) -> str:
    epoch = pkg.get("epoch") or 0
    evr = f"{epoch}:" if epoch else ""
    return f"{pkg.get('name')}-{evr}{pkg.get('version')}-{pkg.get('release')}.{pkg.get('arch')}"


def check_job(job: ComposeJob) -> Blueprint:
    """Everything that can be refused before a single request goes out; the blueprint."""
    if job.serve is not None:
        if job.options.url is not None:
            raise InputError("command line", "--serve-repo", "give --url or --serve-repo, "
                             "not both")
        from builder.imagebuilder.serve import parse_address

        parse_address(job.serve)
    served = f"http://{job.serve}/" if job.serve else None
    replace(job.options, url=job.options.url or served).validate()
    blueprint = load_blueprint(job.build_dir, job.image)
    check_for_release(blueprint, job.release, job.build_dir)
    return blueprint


@contextmanager
def _served(job: ComposeJob, head: str | None, progress: Progress) -> Iterator[str | None]:
    if job.serve is None:
        yield job.options.url
        return
    from builder.imagebuilder.serve import serve_repo

    repo = Layout(job.build_dir).ostree_repo
    if head is None:
        if job.options.kind == "installer":
            raise InputError("command line", "--serve-repo", f"{repo} has no commit on "
                             f"{job.options.ref} to install; compose the commit first")
        progress.info(f"{repo} has no commit on {job.options.ref} yet: nothing to serve")
        yield None
        return
    with serve_repo(repo, job.serve, progress) as url:
        yield url


def _parent(job: ComposeJob, head: str | None, url: str | None,
            progress: Progress) -> tuple[str | None, str | None]:
    """(parent, url) for the request: a commit is built on the ref's head in DIR/ostree/repo."""
    options = job.options
    if options.kind == "installer":
        return None, url
    if options.parent is not None:
        return options.parent, url
    if url is None:
        return None, None
    if head is None:
        # With a URL and no parent the service resolves the ref itself at the URL
        # (images makeOSTreeParentCommit), which fails for a ref that has no commit yet.
        progress.info(f"no commit on {options.ref} yet: the service builds the first one, "
                      "without a parent")
        return None, None
    return head, url


def run_compose(client: WeldrClient, job: ComposeJob, progress: Progress,
                runner: Runner) -> ComposeResult:
    """Check, push, depsolve, start, wait, download, publish: one compose on the service."""
    blueprint = check_job(job)
    repo = Repo(Layout(job.build_dir).ostree_repo, runner)
    head = repo.rev_parse(job.options.ref) if repo.exists() else None
    service = client.endpoint.describe()
    with progress.step(f"image types offered by {service}"):
        image_type = choose_image_type(job.options.image_type, client.compose_types(), service)
        progress.info(f"building {image_type}", image_type=image_type)
    data, text = blueprint.data, blueprint.text  # type: tuple[dict[str, Any], str | None]
    if job.options.kind == "installer":
        data, text = installer_view(blueprint.data), None
        dropped = left_out(blueprint.data, data)
        if dropped:
            progress.info(f"{image_type} supports none of {', '.join(dropped)} (they are in "
                          f"the commit it installs): blueprint {data['name']} leaves them out")
    with progress.step(f"blueprint {data['name']} on {service}"):
        sync_blueprint(client, data, text, progress)
    if job.options.kind == "commit":
        with progress.step(f"depsolve {data['name']}"):
            packages = client.depsolve(str(data["name"]))
            progress.info(f"{len(packages)} packages resolve", packages=len(packages))
    with _served(job, head, progress) as served_url:
        parent, url = _parent(job, head, served_url, progress)
        request = job.options.request(str(data["name"]), image_type, parent=parent, url=url)
        with progress.step(f"compose {image_type} ({job.options.ref})"):
            started = client.start_compose(request)
            progress.info(f"compose started: {started.uuid}", uuid=started.uuid)
            for warning in started.warnings:
                progress.info(f"service warning: {warning}", warning=warning)
            write_record(job.target(), started.uuid, image_type=image_type,
                         ref=job.options.ref, parent=parent, url=url,
                         payload=head if job.options.kind == "installer" else None,
                         release=job.release.evr, warnings=list(started.warnings))
            status = wait_for_compose(client, started.uuid, progress, job.wait)
    result = fetch_result(client, status, job.target(), progress, runner)
    return replace(result, warnings=started.warnings)
