"""SELinux in the composed commit: every object labelled from the image's own (SAMPLE) policy,
MicroShift's paths with the types of its module's file contexts (microshift.fc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import requires
from tests.support.ostree import ComposedPair, ostree
from tests.support.selinux import commit_labels, lookup, module_file_contexts

pytestmark = [
    pytest.mark.integration,
    requires.root_only("compose runs rpm --root and keeps ownership"),
]
POLICY_ROOT = "/usr/etc/selinux/targeted"
# Paths of the module that the sample image ships; the others (/usr/local, the updater, the
# restore area) are checked through the image's policy alone.
SHIPPED = ("/usr/bin/microshift", "/usr/bin/microshift-etcd", "/etc/microshift(/.*)?",
           "/usr/lib/microshift(/.*)?", "/usr/libexec/microshift-greenboot(/.*)?",
           "/usr/share/microshift/functions(/.*)?")


def device_path(path: str) -> str:
    """Where a device sees a commit path: /usr/etc is its /etc."""
    return path.removeprefix("/usr") if path == "/usr/etc" or path.startswith("/usr/etc/") \
        else path


@pytest.fixture(scope="module")
def labels(composed_pair: ComposedPair) -> dict[str, tuple[str, str | None]]:
    """Release 1's commit: device path -> (type, label)."""
    return {device_path(path): (item.kind, item.label)
            for path, item in commit_labels(composed_pair.repo, composed_pair.commit1).items()}


@pytest.fixture(scope="module")
def file_contexts(composed_pair: ComposedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The commit's own compiled file contexts (its policy after microshift's module)."""
    path = tmp_path_factory.mktemp("policy") / "file_contexts"
    text = ostree(f"--repo={composed_pair.repo}", "cat", composed_pair.commit1,
                  f"{POLICY_ROOT}/contexts/files/file_contexts").stdout
    path.write_text(text)
    return path


def test_every_file_and_directory_is_labelled(
        labels: dict[str, tuple[str, str | None]]) -> None:
    assert len(labels) > 300
    unlabelled = sorted(path for path, (_, label) in labels.items() if not label)
    assert unlabelled == []
    assert all(label.startswith("system_u:object_r:") for _, label in labels.values()
               if label)
    assert labels["/usr/bin/microshift"][1] != labels["/usr/bin/bash"][1]  # module at work


def test_module_paths_carry_the_types_of_its_file_contexts(
        labels: dict[str, tuple[str, str | None]], file_contexts: Path) -> None:
    entries = module_file_contexts()
    assert {entry.regex for entry in entries} >= set(SHIPPED)
    for entry in entries:
        matched = {path: label for path, (kind, label) in labels.items()
                   if entry.matches(path, kind)}
        if entry.regex in SHIPPED:
            assert matched, f"{entry.regex}: no path of the commit matches"
        wrong = {path: label for path, label in matched.items() if label != entry.context}
        assert wrong == {}, f"{entry.regex} should be {entry.context}"
        # The commit's policy gives the entry's own paths its context too (what restorecon
        # and systemd-tmpfiles on the device will use), also for paths not in the commit.
        assert lookup(file_contexts, entry.example, entry.mode) == entry.context, entry.regex
        assert entry.context.split(":")[2] not in ("default_t", "unlabeled_t")


def test_var_lib_microshift_is_created_by_tmpfiles_with_the_module_type(
        composed_pair: ComposedPair, file_contexts: Path) -> None:
    # ostree commits carry no /var: systemd-tmpfiles creates MicroShift's state directories
    # at boot and labels them from the image's policy.
    listing = ostree(f"--repo={composed_pair.repo}", "ls", composed_pair.commit1,
                     "/usr/lib/tmpfiles.d").stdout
    declared = set()
    for conf in (line.split()[-1] for line in listing.splitlines() if line.endswith(".conf")):
        text = ostree(f"--repo={composed_pair.repo}", "cat", composed_pair.commit1, conf).stdout
        declared |= {line.split()[1] for line in text.splitlines()
                     if line.startswith("d ")}
    contexts = {entry.example: entry.context for entry in module_file_contexts()}
    for directory in ("/var/lib/microshift", "/var/lib/microshift-backups"):
        assert directory in declared
        assert lookup(file_contexts, directory, 0o40000) == contexts[directory]
        assert contexts[directory] == "system_u:object_r:container_var_lib_t:s0"


def test_commit_metadata_records_the_policy_and_modules(composed_pair: ComposedPair) -> None:
    def meta(key: str) -> str:
        return ostree(f"--repo={composed_pair.repo}", "show", f"--print-metadata-key={key}",
                      composed_pair.commit2).stdout.strip().strip("'")

    assert meta("microshift.selinux") == "labelled"
    assert meta("microshift.selinux-policy").startswith("targeted sha256:")
    assert meta("microshift.selinux-modules") == "microshift"
