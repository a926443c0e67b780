"""rpmlint over the built RPMs, as a cached step, with three kinds of filters: the project's
own (specs/rpmlintrc), the SAMPLE payload's (specs/rpmlintrc.sample), and the findings that
release.yaml accepts for the release's own payload files (`rpmlint.accept`).

An accepted finding becomes a filter for its check on its file in microshift-core only: the
same check on any other file, or another check on that file, still fails the lint. As with
the project's filters, rpmlint reports a filter that matched nothing (unused-rpmlintrc-filter):
an acceptance for a finding rpmlint did not report fails the lint, naming its release.yaml
field. So every acceptance of a passing lint was applied, and the build output shows each one
with its reason. An acceptance for a file that no architecture of this run packages (a
per-architecture payload, narrowed with --arch) is left out.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.paths import SPECS_DIR
from builder.core.steps import Step, file_digest, materialize
from builder.release.catalog import BY_KEY
from builder.release.model import LintAcceptance, Release

RPMLINTRC = SPECS_DIR / "rpmlintrc"
RPMLINTRC_SAMPLE = SPECS_DIR / "rpmlintrc.sample"
# The package that installs the payload's files.
PAYLOAD_PACKAGE = BY_KEY["core"].package
# One line of rpmlint's report: `PACKAGE.ARCH: E: CHECK DETAILS`.
FINDING = re.compile(r"^(?P<package>\S+?)\.(?P<arch>[^.\s:]+): (?P<level>[EWI]): "
                     r"(?P<check>\S+)(?: (?P<detail>.*))?$")
PROJECT_HINT = "fix the spec, or filter a justified check in specs/rpmlintrc"


def run_rpmlint(ctx: Context, rpms: list[Path]) -> None:
    """rpmlint as a cached step: the same RPMs and filters are not linted twice."""
    release = ctx.release
    rcfile_text = rpmlintrc_text(release)
    step = Step("rpmlint", {"rpms": {rpm.name: file_digest(rpm) for rpm in rpms},
                            "rpmlintrc": rcfile_text})

    def lint(out: Path) -> None:
        rcfile = out / "rpmlintrc"
        rcfile.write_text(rcfile_text)
        proc = ctx.runner.run([_rpmlint_command(), "--rpmlintrc", str(rcfile),
                               *map(str, rpms)], check=False)
        output = proc.stdout.decode(errors="replace")
        (out / "rpmlint.txt").write_text(output)
        summary = output.strip().splitlines()[-1] if output.strip() else "(no output)"
        ctx.progress.info(summary)
        errors = [line for line in output.splitlines() if ": E: " in line]
        if proc.returncode != 0 or errors:
            raise lint_failure(release, errors, output)

    with ctx.progress.step(f"rpmlint: {len(rpms)} RPMs"):
        materialize(step, ctx.build_dir, lint, ctx.progress)
        # A passing lint (now or cached) applied every acceptance it was given.
        for accepted in acceptances(release):
            ctx.progress.info(f"rpmlint: accepted {accepted.check} {accepted.path} "
                              f"({PAYLOAD_PACKAGE}): {_one_line(accepted.why)}")


def rpmlintrc_text(release: Release) -> str:
    """specs/rpmlintrc, specs/rpmlintrc.sample's filter for the architectures whose core
    payload is all SAMPLE stand-ins (with a payload per architecture, maybe not all), and a
    filter for each finding release.yaml accepts for the payload."""
    sample = [arch for arch in release.architectures
              if all(file.source.is_sample for file in release.payload_for(arch))]
    text = RPMLINTRC.read_text()
    if sample:
        text += RPMLINTRC_SAMPLE.read_text().replace("{arches}", "|".join(sample))
    accepted = acceptances(release)
    if accepted:
        text += "\n# release.yaml's rpmlint.accept: findings on the release's own payload files.\n"
    for entry in accepted:
        text += f'# {entry.field}: {_one_line(entry.why)}\naddFilter(r"{_filter(entry)}")\n'
    return text


def acceptances(release: Release) -> tuple[LintAcceptance, ...]:
    """release.yaml's accepted findings on files that this run packages."""
    files = _payload_files(release)
    return tuple(entry for entry in release.lint_acceptances if entry.path in files)


def lint_failure(release: Release, errors: list[str], output: str) -> BuildError:
    """The failed lint: its errors, and for each what to do (accept a finding on a payload
    file in release.yaml, remove an acceptance rpmlint did not use, or fix the project)."""
    files = _payload_files(release)
    unused = {f'"{_filter(entry)}"': entry for entry in acceptances(release)}
    to_accept: dict[tuple[str, str], None] = {}
    hints: list[str] = []
    project = not errors
    for line in errors:
        match = FINDING.match(line)
        detail = (match["detail"] or "") if match else ""
        if match and match["check"] == "unused-rpmlintrc-filter" and detail in unused:
            entry = unused[detail]
            hints.append(f"rpmlint reported no {entry.check} on {entry.path}: remove "
                         f"{entry.field} from {release.path} (or correct its check or path)")
        elif match and match["package"] == PAYLOAD_PACKAGE and detail.split(" ")[0] in files:
            to_accept[(match["check"], detail.split(" ")[0])] = None
        else:
            project = True
    if to_accept:
        entries = ", ".join(f"{{check: {check}, path: {path}, why: ...}}"
                            for check, path in to_accept)
        hints.insert(0, f"if justified, accept it for your payload in {release.path}: "
                        f"rpmlint.accept: [{entries}]")
    if project:
        hints.append(PROJECT_HINT)
    listing = "\n".join(errors[:20]) or output[-2000:]
    return BuildError(f"rpmlint found errors in the built RPMs:\n{listing}",
                      hint="; ".join(hints))


def _payload_files(release: Release) -> set[str]:
    return {file.install for arch in release.architectures
            for file in release.payload_for(arch)}


def _filter(entry: LintAcceptance) -> str:
    """The rpmlint filter (a Python regular expression over `PACKAGE.ARCH: LEVEL: CHECK
    DETAILS`) for one check on one file of the payload package, on any architecture."""
    return (rf"^{_literal(PAYLOAD_PACKAGE)}\.[^:\s]+: [EWI]: {_literal(entry.check)} "
            rf"{_literal(entry.path)}(?: |$)")


def _literal(text: str) -> str:
    r"""`text` matched literally, written without quotes or line breaks (an rpmlintrc line
    is `addFilter("...")`, read up to its last quote): letters, digits, / _ - as they are,
    `.` as `\.`, anything else as a \x, \u or \U escape."""
    out = []
    for char in text:
        if char.isascii() and (char.isalnum() or char in "/_-"):
            out.append(char)
        elif char == ".":
            out.append(r"\.")
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _rpmlint_command() -> str:
    beside_python = Path(sys.executable).parent / "rpmlint"
    return str(beside_python) if beside_python.exists() else "rpmlint"
