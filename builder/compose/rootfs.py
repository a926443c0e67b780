"""Filesystem-tree work for a compose: rpm installs and the ostree layout rules.

The tree is checked out from the build repository with hard links to its objects, so
nothing here may write into an existing file in place: files are replaced by rename
(`replace_file`), and files a tool will modify in place (the rpm database) are first given
their own inode (`unshare`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from builder.compose.inputs import PackageFile
from builder.core.download import DigestMismatch, DownloadFailed, fetch_verified
from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.core.steps import file_digest

RPMDB_CANDIDATES = ("/usr/lib/sysimage/rpm", "/usr/share/rpm", "/var/lib/rpm")
AUTOVAR_CONF = "usr/lib/tmpfiles.d/microshift-builder-autovar.conf"
FACTORY = "usr/share/factory"


def tree_path(tree: Path, path: str) -> Path:
    """`path` (absolute, as on the device) inside `tree`, following symlinks as a chroot would.

    Absolute symlinks in the tree (e.g. /home -> /var/home) must not lead out of it.
    """
    current = PurePosixPath("/")
    parts = list(PurePosixPath(path).parts[1:])
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        host = tree / candidate.relative_to("/")
        if host.is_symlink():
            hops += 1
            if hops > 40:
                raise BuildError(f"too many symlinks resolving {path} in {tree}")
            target = PurePosixPath(os.readlink(host))
            parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            current = PurePosixPath("/") if target.is_absolute() else current
            continue
        current = candidate
    return tree / current.relative_to("/")


def replace_file(path: Path, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
    """Write a new inode and rename it over `path` (never writes through a hard link)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.chown(tmp, uid, gid)
        tmp.chmod(mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def unshare(path: Path) -> None:
    """Give a hard-linked file its own inode (same content, mode, owner, xattrs)."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
        return
    tmp = path.with_name(f".{path.name}.unshare-{os.getpid()}")
    shutil.copy2(path, tmp)
    os.chown(tmp, info.st_uid, info.st_gid)
    tmp.chmod(stat.S_IMODE(info.st_mode))
    os.replace(tmp, path)


def find_rpmdb(tree: Path) -> str:
    """The base's rpm database directory, as an absolute path on the device."""
    for candidate in RPMDB_CANDIDATES:
        directory = tree / candidate.lstrip("/")
        if (directory / "rpmdb.sqlite").is_file() or (directory / "Packages").is_file():
            return candidate
    raise BuildError(f"the base tree has no rpm database (looked in {', '.join(RPMDB_CANDIDATES)})",
                     hint="the base commit must be an rpm-based edge commit")


def rpm_env(epoch: int) -> dict[str, str]:
    # rpm 4.18 takes install times from SOURCE_DATE_EPOCH, which keeps the rpmdb
    # byte-identical between two installs of the same packages.
    return {"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C", "TZ": "UTC"}


def rpm_base_args(tree: Path, dbpath: str) -> list[str]:
    return ["rpm", "--root", str(tree), "--dbpath", dbpath]


def installed_nevras(runner: Runner, tree: Path, dbpath: str) -> dict[str, str]:
    """name -> name-epoch:version-release.arch of every package in the tree's rpmdb."""
    out = runner.output([*rpm_base_args(tree, dbpath), "-qa", "--qf",
                         "%{NAME} %{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n"])
    pairs = (line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {name: nevra for name, nevra in pairs if name != "gpg-pubkey"}


def full_nevra(pkg: PackageFile) -> str:
    return f"{pkg.name}-{pkg.epoch}:{pkg.version}-{pkg.release}.{pkg.arch}"


def verify_packages(packages: Sequence[PackageFile], lock: Path) -> None:
    """Every RPM of the lock is present (downloaded when it comes from a URL repository)
    and has the sha256 the lock names."""
    for pkg in packages:
        if pkg.url and not (pkg.path.is_file() and file_digest(pkg.path) == pkg.sha256):
            _download(pkg)
        if not pkg.path.is_file():
            raise BuildError(f"{lock}: package {pkg.nevra}: {pkg.path} does not exist",
                             hint="re-run `python -m builder blueprint` (depsolve) and `rpms`")
        if pkg.sha256 and file_digest(pkg.path) != pkg.sha256:
            raise BuildError(f"{lock}: package {pkg.nevra}: {pkg.path} does not match the "
                             f"locked sha256 {pkg.sha256}", hint="the RPM changed after depsolve; "
                             "re-run `python -m builder blueprint`")


def _download(pkg: PackageFile) -> None:
    assert pkg.url is not None and pkg.sha256 is not None
    try:
        fetch_verified(pkg.url, pkg.sha256, pkg.path)
    except DigestMismatch:
        raise BuildError(f"{pkg.url}: downloaded file does not match the locked sha256 "
                         f"{pkg.sha256}", hint="the repository changed; re-run depsolve") from None
    except DownloadFailed as exc:
        raise BuildError(f"cannot download {pkg.nevra} from {pkg.url}: {exc}") from exc


def install_packages(runner: Runner, tree: Path, packages: Sequence[PackageFile],
                     epoch: int) -> list[PackageFile]:
    """Install (or upgrade to) the locked packages the tree does not already hold, exactly.

    No scriptlets and no triggers run on the build host (--noscripts --notriggers): their
    effects are applied declaratively afterwards. Returns the packages installed.
    """
    dbpath = find_rpmdb(tree)
    db_dir = tree / dbpath.lstrip("/")
    for path in db_dir.iterdir():
        unshare(path)
    have = installed_nevras(runner, tree, dbpath)
    todo = [pkg for pkg in packages if have.get(pkg.name) != full_nevra(pkg)]
    upgraded = sorted({pkg.name for pkg in todo if pkg.name in have})
    if upgraded:
        # rpm may chmod/chown unchanged files of an upgraded package in place.
        listed = runner.output([*rpm_base_args(tree, dbpath), "-ql", *upgraded])
        for name in listed.splitlines():
            if name.startswith("/") and (tree / name.lstrip("/")).is_file():
                unshare(tree / name.lstrip("/"))
    if not todo:
        return []
    with _merged_passwd(tree):
        proc = runner.run([*rpm_base_args(tree, dbpath), "-U", "--noscripts", "--notriggers",
                           "--nosignature", "--ignorearch", "--oldpackage",
                           *[str(pkg.path) for pkg in sorted(todo, key=lambda p: p.name)]],
                          env=rpm_env(epoch))
    unknown = [line for line in proc.stderr.decode(errors="replace").splitlines()
               if "does not exist - using root" in line]
    if unknown:
        raise BuildError("rpm could not resolve file owners in the base tree:\n  "
                         + "\n  ".join(unknown),
                         hint="the base lacks these users/groups; add them to the base first")
    return todo


@contextmanager
def _merged_passwd(tree: Path) -> Iterator[None]:
    """rpm resolves owners through /etc/passwd only; rpm-ostree bases keep system users in
    /usr/lib/passwd (nss-altfiles). Merge them in for the install and restore afterwards."""
    saved: dict[str, bytes | None] = {}
    try:
        for name in ("passwd", "group"):
            lib, etc = tree / "usr/lib" / name, tree / "etc" / name
            if lib.is_file():
                saved[name] = etc.read_bytes() if etc.is_file() else None
                replace_file(etc, (saved[name] or b"") + lib.read_bytes())
        yield
    finally:
        for name, original in saved.items():
            etc = tree / "etc" / name
            if original is None:
                etc.unlink(missing_ok=True)
            else:
                replace_file(etc, original)


def package_files(runner: Runner, rpms: Iterable[Path]) -> list[str]:
    paths = [str(p) for p in rpms]
    if not paths:
        return []
    out = runner.output(["rpm", "-qp", "--nosignature", "--qf", "[%{FILENAMES}\\n]", *paths])
    return sorted(set(out.splitlines()))


def clean_rpmdb(tree: Path) -> None:
    """Fold the sqlite WAL into the database and drop the per-host side files."""
    db_dir = tree / find_rpmdb(tree).lstrip("/")
    sqlite_db = db_dir / "rpmdb.sqlite"
    wal = db_dir / "rpmdb.sqlite-wal"
    if wal.is_file() and wal.stat().st_size > 0:
        unshare(sqlite_db)
        with sqlite3.connect(sqlite_db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in ("rpmdb.sqlite-wal", "rpmdb.sqlite-shm", ".rpm.lock", ".dbenv.lock"):
        (db_dir / side).unlink(missing_ok=True)


def etc_to_usr_etc(tree: Path) -> None:
    """ostree stores /etc as /usr/etc; the deployment 3-way-merges it into /etc."""
    if (tree / "usr/etc").exists():
        raise BuildError(f"{tree}: both /etc and /usr/etc exist; cannot store /etc")
    if (tree / "etc").is_dir():
        os.rename(tree / "etc", tree / "usr/etc")


def usr_etc_to_etc(tree: Path) -> None:
    """The reverse, so rpm and our tools see /etc while the tree is being built."""
    if (tree / "usr/etc").is_dir():
        if (tree / "etc").exists():
            raise BuildError(f"{tree}: the base commit has both /etc and /usr/etc")
        os.rename(tree / "usr/etc", tree / "etc")
    (tree / "etc").mkdir(mode=0o755, exist_ok=True)


def var_to_tmpfiles(tree: Path) -> list[str]:
    """Empty /var, recreating its content at boot through tmpfiles.d (as rpm-ostree does).

    ostree never carries /var: a deployment gets it from the stateful /var. Directories and
    symlinks become `d`/`L` lines; regular files move to /usr/share/factory/var and are
    copied into place by `C` lines. Paths already declared by a package's tmpfiles.d are
    left to that declaration. Returns the lines written.
    """
    var = tree / "var"
    if not var.is_dir():
        var.mkdir(mode=0o755)
        return []
    declared = _declared_tmpfiles(tree)
    lines: list[str] = []
    for path in sorted(var.rglob("*")):
        device_path = "/" + path.relative_to(tree).as_posix()
        info = path.lstat()
        owner = f"{info.st_uid} {info.st_gid}"
        mode = f"{stat.S_IMODE(info.st_mode):04o}"
        if device_path in declared:
            continue
        if stat.S_ISDIR(info.st_mode):
            lines.append(f"d {device_path} {mode} {owner} - -")
        elif stat.S_ISLNK(info.st_mode):
            lines.append(f"L {device_path} - - - - {os.readlink(path)}")
        elif stat.S_ISREG(info.st_mode):
            factory = tree / FACTORY / path.relative_to(tree)
            factory.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, factory)
            lines.append(f"C {device_path} - - - - /{FACTORY}{device_path}")
        else:
            raise BuildError(f"{device_path}: special files cannot be stored in an ostree commit")
    for child in var.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    if lines:
        header = ("# /var content of the installed packages, recreated at boot.\n"
                  "# Generated by microshift-edge-builder (ostree commits carry no /var).\n")
        replace_file(tree / AUTOVAR_CONF, (header + "\n".join(lines) + "\n").encode())
    return lines


def _declared_tmpfiles(tree: Path) -> set[str]:
    paths: set[str] = set()
    for directory in ("usr/lib/tmpfiles.d", "etc/tmpfiles.d", "usr/etc/tmpfiles.d"):
        for conf in sorted((tree / directory).glob("*.conf")):
            if conf.name == Path(AUTOVAR_CONF).name:
                continue
            for line in conf.read_text(errors="replace").splitlines():
                fields = line.split()
                if len(fields) >= 2 and not fields[0].startswith("#"):
                    paths.add(fields[1])
    return paths
