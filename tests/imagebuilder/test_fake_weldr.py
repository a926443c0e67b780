"""The fake service refuses what osbuild-composer refuses and answers as it answers.

A fake that accepts more than the service hides client bugs, so its modelled behaviours are
tested here one by one, each against the upstream rule cited in the fake's modules.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from builder.core.progress import Progress
from builder.imagebuilder.serve import serve_repo
from tests.imagebuilder.conftest import BLUEPRINT, IMAGE, PUBLISHED, SAMPLE, VERSION
from tests.imagebuilder.fake_weldr import FakeWeldr

TOML = "text/x-toml"
JSON = "application/json"


def call(fake: FakeWeldr, method: str, path: str, body: bytes = b"",
         ctype: str | None = None, *, query: str = "") -> tuple[int, Any]:
    code, _, payload, _ = fake.route(method, "/api/v1/" + path, ctype, body, query)
    return code, json.loads(payload) if payload.startswith((b"{", b"[")) else payload


def push(fake: FakeWeldr, text: str, ctype: str | None = TOML) -> tuple[int, Any]:
    return call(fake, "POST", "blueprints/new", text.encode(), ctype)


def errors(answer: Any) -> list[tuple[str, str]]:
    return [(e["id"], e["msg"]) for e in answer["errors"]]


def stored(fake: FakeWeldr, name: str = IMAGE) -> dict[str, Any]:
    code, answer = call(fake, "GET", f"blueprints/info/{name}")
    assert code == 200
    (bp,) = answer["blueprints"]
    return dict(bp)


def start(fake: FakeWeldr, compose_type: str = "edge-commit", **ostree: str) -> tuple[int, Any]:
    request = {"blueprint_name": IMAGE, "compose_type": compose_type, "branch": "master",
               "ostree": {"ref": "microshift/x86_64/edge", "parent": "", "url": "", **ostree}}
    return call(fake, "POST", "compose", json.dumps(request).encode(), JSON)


BAD_BLUEPRINTS = [
    ('name = "x"\nversion = 1\n', "incompatible types", "version"),
    ('name = "x"\nversion = "4.14"\n', "Invalid 'version', must use Semantic Versioning", "4.14"),
    ('name = "x"\nversion = "1.0.0"\n[[packages]]\nversion = "1"\n',
     "All package entries need to contain the name", "Entry #1 has version '1' but no name"),
    ('name = "x"\n[[packages]]\nname = 7\n', "incompatible types", "packages[0].name"),
    ('name = "x"\n[containers]\nsource = "a"\n', "incompatible types", "containers"),
    ('name = "x"\n[[customizations.files]]\npath = "etc/x"\n', "path must be absolute", ""),
    ('name = "x"\n[[customizations.files]]\npath = "/etc/x"\nmode = "999"\n',
     "invalid mode 999", ""),
    ('name = "x"\n[[customizations.files]]\npath = "/etc/./x"\n', "path must be canonical", ""),
    ('name = "x"\n[[customizations.files]]\npath = "/etc/x"\nuser = "no body"\n',
     "user name 'no body' doesn't conform", ""),
    ('name = "x"\n[[customizations.files]]\npath = 5\n', "path must be a string", ""),
    ('name = "x"\n[customizations.services]\nenabled = "a.service"\n', "incompatible types",
     "customizations.services.enabled"),
    ('name = "x"\ndistro = "centos-7"\n', "'centos-7' is not a valid distribution", ""),
]


@pytest.mark.parametrize(("text", "problem", "detail"), BAD_BLUEPRINTS)
def test_push_refuses_what_the_service_refuses(fake: FakeWeldr, text: str, problem: str,
                                               detail: str) -> None:
    code, answer = push(fake, text)
    assert code == 400
    ((err_id, msg),) = errors(answer)
    assert err_id == "BlueprintsError"
    assert problem in msg and detail in msg
    assert fake.blueprints == {}


def test_push_needs_a_valid_name_and_a_content_type(fake: FakeWeldr) -> None:
    assert errors(push(fake, 'name = "a b"\n')[1]) == [
        ("InvalidChars", "Invalid characters in API path")]
    assert errors(push(fake, BLUEPRINT, ctype=None)[1]) == [
        ("BlueprintsError", "missing Content-Type header")]
    code, answer = push(fake, BLUEPRINT, ctype="text/plain")
    assert code == 400 and "blueprint must be in json or toml format" in errors(answer)[0][1]
    assert errors(push(fake, "")[1]) == [("BlueprintsError", "Missing blueprint")]


def test_push_keeps_known_fields_only_and_fills_defaults(fake: FakeWeldr) -> None:
    code, _ = push(fake, BLUEPRINT + 'surprise = "ignored, as Go decoding ignores it"\n')
    assert code == 200
    bp = stored(fake)
    assert "surprise" not in bp
    assert bp["modules"] == [] and bp["groups"] == [] and bp["enabled_modules"] == []
    assert bp["containers"][0]["tls-verify"] is True
    code, _ = push(fake, json.dumps({"name": "bare"}), ctype=JSON)
    assert code == 200
    assert stored(fake, "bare")["version"] == "0.0.0"


def test_pushing_the_same_version_again_bumps_the_patch(fake: FakeWeldr) -> None:
    versions = []
    for text in (BLUEPRINT, BLUEPRINT, BLUEPRINT, BLUEPRINT.replace(VERSION, "4.15.0")):
        push(fake, text)
        versions.append(stored(fake)["version"])
    # store.go PushBlueprint bumps only a version equal to the held one (go-semver BumpPatch
    # drops the pre-release); another version replaces the held one as it is.
    assert versions == [VERSION, "4.14.3", VERSION, "4.15.0"]


def test_delete_of_an_unknown_blueprint_is_an_error(fake: FakeWeldr) -> None:
    code, answer = call(fake, "DELETE", "blueprints/delete/nope")
    assert code == 400
    assert errors(answer) == [("BlueprintsError", "Unknown blueprint: nope")]


COMPOSE_REFUSALS = [
    ({"compose_type": "iot-commit"}, 400, "ComposeError",
     'Failed to get compose type "iot-commit": invalid image type: iot-commit'),
    ({"ref": "rhel/9/x86_64/édge"}, 400, "ManifestCreationFailed",
     'invalid ostree image ref "rhel/9/x86_64/édge"'),
    ({"ref": "a" * 64}, 400, "ManifestCreationFailed", "ostree image ref looks like a checksum"),
    ({"parent": "microshift/x86_64/edge"}, 400, "ManifestCreationFailed",
     "ostree parent ref specified, but no URL to retrieve it"),
    ({"compose_type": "edge-installer"}, 400, "ManifestCreationFailed",
     'options validation failed for image type "edge-installer": ostree.url: required'),
    ({"url": "http://127.0.0.1:9/repo"}, 400, "OSTreeOptionsError",
     "error sending request to ostree repository"),
]


@pytest.mark.parametrize(("change", "code", "err_id", "msg"), COMPOSE_REFUSALS)
def test_compose_start_refuses_what_the_service_refuses(
        fake: FakeWeldr, change: dict[str, str], code: int, err_id: str, msg: str) -> None:
    push(fake, BLUEPRINT)
    compose_type = change.pop("compose_type", "edge-commit")
    got_code, answer = start(fake, compose_type, **change)
    assert got_code == code
    ((got_id, got_msg),) = errors(answer)
    assert got_id == err_id and msg in got_msg
    assert fake.composes == {}


def test_compose_request_shape_checks(fake: FakeWeldr) -> None:
    push(fake, BLUEPRINT)
    assert errors(call(fake, "POST", "compose", b"{}", "text/plain")[1]) == [
        ("MissingPost", "blueprint must be json")]
    assert call(fake, "POST", "compose", b"{not json", JSON)[0] == 404
    body = json.dumps({"blueprint_name": "a/b", "compose_type": "edge-commit"}).encode()
    assert errors(call(fake, "POST", "compose", body, JSON)[1]) == [
        ("InvalidChars", "Invalid characters in API path")]


def test_files_outside_the_ostree_policy_fail_the_manifest(fake: FakeWeldr) -> None:
    push(fake, BLUEPRINT.replace("/etc/microshift/config.yaml", "/usr/bin/config.yaml"))
    code, answer = start(fake)
    assert code == 400
    assert "the following custom files are not allowed: ['/usr/bin/config.yaml']" in \
        errors(answer)[0][1]


def test_containers_are_resolved_when_the_compose_starts(fake: FakeWeldr) -> None:
    push(fake, BLUEPRINT.replace(PUBLISHED, SAMPLE))
    code, answer = start(fake)
    assert code == 500
    ((err_id, msg),) = errors(answer)
    assert err_id == "ContainerResolveError"
    assert "quay.io/microshift-sample/router" in msg


@pytest.mark.parametrize("distro", ["fedora", "rhel-10"])
def test_edge_types_exist_only_on_rhel_9(fake: FakeWeldr, distro: str) -> None:
    push(fake, BLUEPRINT)
    code, answer = start(fake, "edge-commit")
    assert (code, errors(answer)[0][0]) == (400, "ComposeError")
    code, answer = start(fake, "iot-commit")
    assert code == (200 if distro == "fedora" else 400)


def test_installer_warns_about_what_it_does_not_support(fake: FakeWeldr,
                                                         tmp_path: Path) -> None:
    push(fake, BLUEPRINT)
    refs = tmp_path / "repo" / "refs" / "heads" / "microshift" / "x86_64"
    refs.mkdir(parents=True)
    (refs / "edge").write_text("ab" * 32 + "\n")
    with serve_repo(tmp_path / "repo", "127.0.0.1:0", Progress(stream=io.StringIO())) as url:
        code, answer = start(fake, "edge-installer", url=url)
    assert code == 200
    assert answer["warnings"] == [
        'blueprint validation failed for image type "edge-installer": packages: not supported']
    assert fake.composes[answer["build_id"]].payload == "ab" * 32
    code, answer = start(fake, "edge-commit")
    assert code == 200 and answer["warnings"] is None


def test_status_accepts_any_uuid_form_and_answers_lower_case(fake: FakeWeldr) -> None:
    push(fake, BLUEPRINT)
    _, answer = start(fake)
    uuid = answer["build_id"]
    for form in (uuid.upper(), "{" + uuid + "}", "urn:uuid:" + uuid.upper(),
                 uuid.replace("-", "")):
        code, status = call(fake, "GET", f"compose/status/{form}")
        assert code == 200
        assert [e["id"] for e in status["uuids"]] == [uuid]
    code, status = call(fake, "GET", "compose/status/0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    assert (code, status["uuids"]) == (200, [])
    code, status = call(fake, "GET", "compose/status/nope")
    assert errors(status) == [("UnknownUUID", "nope is not a valid build uuid")]


def test_image_of_an_unfinished_compose_is_in_the_wrong_state(fake: FakeWeldr) -> None:
    push(fake, BLUEPRINT)
    uuid = start(fake)[1]["build_id"]
    call(fake, "GET", f"compose/status/{uuid}")  # WAITING
    code, answer = call(fake, "GET", f"compose/image/{uuid.upper()}")
    assert code == 400
    assert errors(answer) == [("BuildInWrongState",
                               f"Build {uuid.upper()} is in wrong state: WAITING")]


def test_unknown_routes_and_versions_are_json_404s(fake: FakeWeldr) -> None:
    not_found = {"status": False, "errors": [{"code": 404, "id": "HTTPError",
                                              "msg": "Not Found"}]}
    for path in ("/api/v1/nothing/here", "/api/v2/compose/types", "/weldr", "/api/v1/"):
        code, _, body, _ = fake.route("GET", path, None, b"")
        assert (code, json.loads(body)) == (404, not_found)
    code, _, body, _ = fake.route("GET", "/api/v1/compose", None, b"")
    assert (code, body) == (405, b"")  # httprouter: the route exists for POST only


@pytest.mark.integration
@pytest.mark.parametrize(("distro", "compose_type", "stamp"),
                         [("rhel-9", "edge-commit", "9.6"), ("fedora", "iot-commit", "42")])
def test_commit_carries_the_distro_version_not_the_blueprint_version(
        fake: FakeWeldr, tmp_path: Path, distro: str, compose_type: str, stamp: str) -> None:
    push(fake, BLUEPRINT)
    uuid = start(fake, compose_type)[1]["build_id"]
    fake.scenario.states = ("FINISHED",)
    call(fake, "GET", f"compose/status/{uuid}")
    code, _, payload, headers = fake.route("GET", f"/api/v1/compose/image/{uuid}", None, b"")
    assert code == 200
    assert headers["Content-Disposition"] == f"attachment; filename={uuid}-commit.tar"
    with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
        # The fake's own tarball; Python 3.11.2 (Debian 12) has no extraction filters.
        tar.extractall(tmp_path / "x", **({"filter": "data"} if hasattr(tarfile, "data_filter")
                                          else {}))
    meta = json.loads((tmp_path / "x" / "compose.json").read_text())
    assert meta["ostree-version"] == stamp
    shown = subprocess.run(["ostree", f"--repo={tmp_path / 'x' / 'repo'}", "show",
                            "--print-metadata-key=version", meta["ostree-commit"]],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == f"'{stamp}'"
