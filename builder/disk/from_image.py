"""`disk --from-image`: where the bootc image a disk is installed from comes from, and what
the disk's /etc gets so that the device takes only the release's signed images.

The image is one of three (SOURCE):

    (none)                              the build's own: what `bootc` wrote for the image and
                                        the architecture (DIR/bootc/NAME/, its report)
    oci:PATH[:TAG]                      an OCI image layout on disk
    docker://HOST/NAME[:TAG|@DIGEST]    pulled from a registry with skopeo first, checked
                                        against --policy (with --registries-d naming the
                                        lookaside) when one is given

and is handed to bootc as a layout holding only it. The device follows REFERENCE (its
origin names it, `bootc upgrade` pulls it): the docker source itself, or --reference, or for
the build's own image where `bootc --push` pushed it. Its /etc gets containers-policy.json
rejecting every image but REFERENCE's repository signed by the release key, the key, and
with --lookaside the registries.d entry naming where the signatures are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.bootc.oci import INDEX, Layout, single_layout
from builder.bootc.publish import push_tag
from builder.bootc.registry import POLICY_KEY, device_policy, pull, registries_yaml
from builder.context import Context
from builder.core.errors import BuildError, InputError
from builder.release.model import GOARCH

OPTION = "--from-image"
ALLOWED = "allowed: nothing (the build's bootc image), oci:PATH[:TAG], " \
          "docker://HOST/NAME[:TAG|@sha256:DIGEST]"
REF_NAME = "org.opencontainers.image.ref.name"
# A registry reference as containers/image parses one, its host required (no docker.io
# shorthand: the device's policy is scoped to the repository as written).
REFERENCE = re.compile(
    r"^(?P<repository>(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)+|[a-z0-9-]+(?=:\d)|"
    r"\[[0-9a-fA-F:]+\])(?::\d+)?"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


@dataclass(frozen=True)
class ImageRequest:
    """--from-image as given: `kind` is build, oci or docker."""

    kind: str
    path: Path | None = None     # oci: the layout
    tag: str = ""                # oci: the image's ref.name in it
    reference: str = ""          # docker: what is pulled


@dataclass(frozen=True)
class PullOptions:
    policy: Path | None = None       # containers-policy.json the pull is checked against
    registries: Path | None = None   # registries.d for it (the lookaside)
    tls_verify: bool = True


@dataclass(frozen=True)
class ChosenImage:
    layout: Path       # a layout holding only the image
    manifest: str
    commit: str        # the commit it was made from, when the build made it ("" otherwise)


def parse_source(text: str) -> ImageRequest:
    """--from-image's SOURCE, checked before anything is read or written."""
    if text == "":
        return ImageRequest("build")
    if text.startswith("oci:"):
        path, tag = text[len("oci:"):], ""
        head, sep, tail = path.rpartition(":")
        # A layout whose path has a colon is taken whole; otherwise the last part is a tag.
        if sep and head and "/" not in tail and not (Path(path) / "index.json").is_file():
            path, tag = head, tail
        if not path:
            raise InputError("command line", OPTION, f"{text!r} names no layout; {ALLOWED}")
        if not (Path(path) / "index.json").is_file():
            raise InputError("command line", OPTION, f"{path} is not an OCI image layout "
                             f"(no index.json); {ALLOWED}")
        return ImageRequest("oci", path=Path(path), tag=tag)
    if text.startswith("docker://"):
        reference = text[len("docker://"):]
        check_reference(reference, OPTION)
        return ImageRequest("docker", reference=reference)
    raise InputError("command line", OPTION, f"{text!r} is not an image source; {ALLOWED}")


def check_reference(reference: str, option: str) -> str:
    """The repository (HOST/NAME) of a registry reference; an InputError when it is none."""
    found = REFERENCE.match(reference)
    if found is None:
        raise InputError("command line", option, f"{reference!r} is not a registry "
                         "reference; allowed: HOST[:PORT]/NAMESPACE/NAME[:TAG|@sha256:DIGEST], "
                         "e.g. quay.io/example/microshift-full:4.14.2-1-x86_64")
    return found.group("repository")


def device_reference(ctx: Context, request: ImageRequest, given: str | None, image: str,
                     arch: str) -> str:
    """What the device's origin and policy name: --reference, the docker source, or where
    `bootc --push` pushed the build's image (tagged as it tags it)."""
    if given is not None:
        check_reference(given, "--reference")
        return given
    if request.kind == "docker":
        return request.reference
    if request.kind == "build":
        report = _report(ctx, image, arch)
        pushed = report.get("pushed") or {}
        if isinstance(pushed, dict) and pushed.get("reference"):
            return f"{pushed['reference']}:{push_tag(ctx, arch)}"
    raise InputError("command line", "--reference", "is needed: the image was not pushed "
                     "from this build, so nothing names the registry reference the device "
                     "follows; allowed: HOST[:PORT]/NAMESPACE/NAME[:TAG]")


def choose_image(ctx: Context, request: ImageRequest, image: str, arch: str, work: Path, *,
                 pulling: PullOptions) -> ChosenImage:
    """The image as a layout of its own in `work`."""
    commit = ""
    if request.kind == "build":
        report = _report(ctx, image, arch)
        layout, commit = Layout(ctx.layout.bootc_layout(image)), str(report.get("commit", ""))
        digest = _select(layout, arch, arch, f"{OPTION} (the build's image of {image})")
        if digest != report.get("manifest"):
            raise InputError("command line", OPTION, f"{layout.root} names {digest[:19]} for "
                             f"{arch}, its report {str(report.get('manifest'))[:19]}",
                             hint=f"make it again: python -m builder bootc --image {image}")
    elif request.kind == "oci":
        assert request.path is not None
        layout = Layout(request.path)
        digest = _select(layout, request.tag, arch, OPTION)
    else:
        layout = Layout(work / "pulled")
        digest = pull(ctx.runner, request.reference, layout.root, policy=pulling.policy,
                      registries=pulling.registries, tls_verify=pulling.tls_verify,
                      arch=GOARCH[arch])
    _check_arch(layout, digest, arch)
    try:
        single = single_layout(layout, digest, work / "image")
    except FileNotFoundError as exc:
        raise BuildError(f"{layout.root} lacks a blob of {digest[:19]}: {exc.filename}") \
            from None
    return ChosenImage(single, digest, commit)


def image_etc(reference: str, key: Path, lookaside: str | None) -> dict[str, bytes]:
    """The device's containers policy (only the reference's repository, signed by `key`),
    the key, and the lookaside its signatures are read from."""
    repository = check_reference(reference, "--reference")
    policy = device_policy(repository)
    files = {"containers/policy.json": (json.dumps(policy, indent=2, sort_keys=True)
                                        + "\n").encode(),
             POLICY_KEY.removeprefix("/etc/"): key.read_bytes()}
    if lookaside:
        files["containers/registries.d/microshift.yaml"] = registries_yaml(
            repository, lookaside=lookaside).encode()
    return files


def _report(ctx: Context, image: str, arch: str) -> dict[str, Any]:
    path = ctx.layout.bootc_report(image, arch)
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        raise InputError("command line", OPTION, f"{path} is missing or unreadable: no bootc "
                         f"image of {image} for {arch} in this build",
                         hint=f"make it: python -m builder bootc --image {image}; or give "
                              "oci:PATH or docker://REFERENCE") from None
    return report if isinstance(report, dict) else {}


def _select(layout: Layout, tag: str, arch: str, what: str) -> str:
    """The manifest digest the layout's index names by `tag`, else the one for `arch`."""
    entries = [m for m in layout.index().get("manifests", []) if isinstance(m, dict)]
    if tag:
        named = [m for m in entries if (m.get("annotations") or {}).get(REF_NAME) == tag]
        if len(named) != 1:
            tags = sorted(str((m.get("annotations") or {}).get(REF_NAME)) for m in entries)
            raise InputError("command line", what, f"{layout.root} has no image tagged "
                             f"{tag!r}; allowed: {', '.join(tags) or 'none'}")
        entries = named
    for depth in range(2):   # an image index in the layout: its manifest for the arch
        # A tag names the image itself: its config is checked against the arch after.
        mine = entries if tag and depth == 0 else [
            m for m in entries
            if (m.get("platform") or {}).get("architecture") in (None, GOARCH[arch])]
        if len(mine) != 1:
            raise InputError("command line", what, f"{layout.root} has {len(mine)} images "
                             f"for {arch}; allowed: one (name it: oci:PATH:TAG)")
        if mine[0].get("mediaType") != INDEX:
            return str(mine[0].get("digest"))
        entries = [m for m in layout.read_json(str(mine[0]["digest"])).get("manifests", [])
                   if isinstance(m, dict)]
    raise InputError("command line", what, f"{layout.root}: an index of indexes; allowed: "
                     "an image or an index of images")


def _check_arch(layout: Layout, digest: str, arch: str) -> None:
    manifest = layout.read_json(digest)
    config = layout.read_json(str((manifest.get("config") or {}).get("digest", "")))
    found = config.get("architecture")
    if found not in (None, GOARCH[arch]):
        raise InputError("command line", OPTION, f"{digest[:19]} is an image for {found}, "
                         f"not {arch} ({GOARCH[arch]})")
