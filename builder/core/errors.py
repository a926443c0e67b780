"""Typed errors: every user-facing failure is one clear line, never a traceback."""

from __future__ import annotations

from collections.abc import Sequence


class BuildError(Exception):
    """A failure the user can act on. `hint` says what to do about it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class InputError(BuildError):
    """Bad input: a file, a field, what is wrong and what is allowed."""

    exit_code = 2

    def __init__(self, path: str, field: str, problem: str, hint: str | None = None) -> None:
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {problem}", hint)
        self.path = path
        self.field = field
        self.problem = problem


class ToolError(BuildError):
    """An external command failed; carries the command line and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        tail = _last_lines(stderr, 12)
        message = f"{self.argv[0]} failed with exit code {returncode}: {' '.join(self.argv)}"
        if tail:
            message += "\n" + tail
        super().__init__(message)


class MissingToolError(BuildError):
    def __init__(self, tool: str) -> None:
        super().__init__(
            f"required host tool '{tool}' is not installed",
            hint="run `ci/install-host-tools.sh` (apt-get or dnf) or install it yourself",
        )
        self.tool = tool



def _last_lines(text: str, count: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])
