"""The one command runner finds system tools where Debian keeps them off an unprivileged
user's PATH (/usr/sbin: semodule, losetup, vgs), and names a tool that is really missing."""

from __future__ import annotations

import pytest

from builder.core.errors import MissingToolError
from builder.core.runner import Runner, find_tool, require_tools, search_path
from tests.support import requires

USER_PATH = "/usr/local/bin:/usr/bin:/bin"  # Debian's PATH for a user who is not root


def test_the_sbin_directories_follow_the_path_once_each() -> None:
    assert search_path(USER_PATH) == f"{USER_PATH}:/usr/local/sbin:/usr/sbin:/sbin"
    assert search_path("/usr/sbin:/usr/bin") == "/usr/sbin:/usr/bin:/usr/local/sbin:/sbin"


def test_a_tool_in_sbin_runs_for_a_user_whose_path_lacks_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    requires.need_tools("semodule")
    monkeypatch.setenv("PATH", USER_PATH)
    assert find_tool("semodule") in ("/usr/sbin/semodule", "/sbin/semodule")
    require_tools("semodule")
    assert Runner().run(["semodule", "--help"], check=False).returncode in (0, 1)
    assert Runner().measured(["semodule", "--help"], check=False).proc.stdout
    assert Runner(env={"PATH": USER_PATH}).output(["sh", "-c", "echo $PATH"]).strip() == \
        search_path(USER_PATH)


def test_a_missing_tool_is_named() -> None:
    with pytest.raises(MissingToolError) as missing:
        Runner().run(["msb-no-such-tool", "--version"])
    assert (missing.value.message, missing.value.tool) == (
        "required host tool 'msb-no-such-tool' is not installed", "msb-no-such-tool")
    with pytest.raises(MissingToolError):
        require_tools("msb-no-such-tool")
