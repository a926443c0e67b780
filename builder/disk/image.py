"""A raw (and qcow2) disk image of a deployed commit: /boot and root ext4 partitions behind a
GPT with an EFI system partition (UEFI, the default) or behind an MBR (BIOS).

The file systems are made from the deployed sysroot directory with `mke2fs -d` (no loop
device, no mount: nothing to leave behind when the build is killed), their UUIDs and hash
seeds derived from the image's identity, their times clamped (E2FSPROGS_FAKE_TIME and every
file's mtime at most SOURCE_DATE_EPOCH), so the same inputs give the same bytes. Under BIOS,
GRUB goes into the MBR and the gap before the first partition (builder.disk.grub); under
UEFI, into the EFI system partition (builder.disk.efi). Where the partitions are is
builder.disk.layout's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from builder.core.diskspace import MiB, ensure_space
from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.core.steps import canonical_json, file_digest
from builder.disk import efi
from builder.disk.deployment import Deployment, deploy_sysroot, move_boot
from builder.disk.grub import PLATFORM_DIR, install_bios_boot, make_core_image
from builder.disk.layout import (
    BOOT_SIZE,
    DEFAULT_FIRMWARE,
    FIRST_SECTOR,
    NAMESPACE,
    Layout,
    esp_volume_id,
)

__all__ = ["BOOT_SIZE", "FIRST_SECTOR", "DiskImage", "build_disk", "disk_identity"]

LAYOUT = 1                  # bump when the disk's layout changes: part of its identity
MIN_ROOT = 2048 * MiB


@dataclass(frozen=True)
class DiskImage:
    raw: Path
    qcow2: Path | None
    manifest: Path
    commit: str
    boot_uuid: str
    root_uuid: str
    size: int
    built: bool
    firmware: str = "bios"
    secure_boot: bool = False


def build_disk(runner: Runner, deployment: Deployment, out: Path, name: str, *,
               epoch: int, qcow2: bool = True, firmware: str = DEFAULT_FIRMWARE,
               arch: str = "x86_64", secure_boot: bool = False) -> DiskImage:
    """out/NAME.raw (+ .qcow2) and out/NAME.json, unless they exist for the same inputs.
    `firmware` is uefi or bios (x86_64 only); `arch` picks UEFI GRUB's platform;
    `secure_boot` puts the commit's signed shim and GRUB on the ESP (builder.disk.efi)."""
    if os.geteuid() != 0:
        raise BuildError("a disk image needs root: the deployed files keep their owners "
                         "(ostree admin deploy) and the file systems are made from them",
                         hint="run it as root (sudo), as the compose runs")
    layout = Layout(firmware)
    if firmware == "bios" and arch != "x86_64":
        raise BuildError(f"a BIOS disk image is for x86_64, not {arch}",
                         hint="drop --firmware bios: UEFI is the default")
    if secure_boot and (firmware != "uefi" or arch not in efi.SIGNED_CHAIN):
        raise BuildError(f"Secure Boot is for UEFI disk images of "
                         f"{', '.join(efi.SIGNED_CHAIN)}, not {firmware} on {arch}",
                         hint="drop --secure-boot")
    identity = disk_identity(deployment, epoch, firmware, arch, secure_boot)
    raw, manifest = out / f"{name}.raw", out / f"{name}.json"
    image = _existing(manifest, identity)
    if image is not None:
        return image
    out.mkdir(parents=True, exist_ok=True)
    ensure_space(out, 3 * MIN_ROOT, f"the disk image {raw.name}")
    work = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out))
    try:
        boot_uuid, root_uuid = (str(uuid.uuid5(NAMESPACE, f"{identity}:{part}"))
                                for part in ("boot", "root"))
        stage = work / "sysroot"
        stage.mkdir()
        deployed = deploy_sysroot(runner, stage, deployment, boot_uuid=boot_uuid,
                                  root_uuid=root_uuid, work=work)
        move_boot(stage, work / "boot")
        disk = work / raw.name
        size = _make_disk(runner, disk, work, stage=stage, uuids=(boot_uuid, root_uuid),
                          identity=identity, epoch=epoch, layout=layout, arch=arch,
                          deployed=deployed, secure_boot=secure_boot)
        copy = work / f"{name}.qcow2" if qcow2 else None
        if copy is not None:
            runner.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(disk), str(copy)])
        image = DiskImage(raw, out / copy.name if copy else None, manifest, deployment.commit,
                          boot_uuid, root_uuid, size, built=True, firmware=firmware,
                          secure_boot=secure_boot)
        record = {"identity": identity, **_jsonable(image),
                  "sha256": {raw.name: file_digest(disk)}, "ref": deployment.ref,
                  "remote": deployment.remote, "remote_url": deployment.remote_url}
        if deployment.image is not None:
            record["image"] = {"reference": deployment.image.reference,
                               "manifest": deployment.image.manifest}
        for path in (disk, copy):
            if path is not None:
                os.replace(path, out / path.name)
        (work / "manifest").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(work / "manifest", manifest)  # last: a manifest means the image is whole
        return image
    finally:
        shutil.rmtree(work, ignore_errors=True)


def disk_identity(deployment: Deployment, epoch: int, firmware: str = "bios",
                  arch: str = "x86_64", secure_boot: bool = False) -> str:
    """What the image's bytes depend on. A BIOS image's identity is what it was before UEFI
    images existed (their images are still current); a UEFI image's adds the firmware, the
    architecture and the EFI GRUB it carries."""
    d = deployment
    fields: dict[str, object] = {
        "commit": d.commit, "ref": d.ref, "remote": d.remote, "url": d.remote_url,
        "key": file_digest(d.gpg_key) if d.gpg_key else None, "osname": d.osname,
        "kargs": list(d.kargs), "epoch": epoch, "layout": LAYOUT,
        "etc": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(d.etc_files.items())},
        "var": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(d.var_files.items())},
        "links": dict(sorted(d.etc_links.items())),
        "grub": file_digest(PLATFORM_DIR / "boot.img") if PLATFORM_DIR.is_dir() else None,
    }
    if d.image is not None:
        # Installed from an image: its manifest and the bootc that imported it (only then,
        # so the identities of images installed from commits stay what they were).
        fields.update(image={"manifest": d.image.manifest, "reference": d.image.reference,
                             "bootc": file_digest(d.image.bootc)})
    if firmware != "bios":
        kernel = efi.platform(arch).directory / "kernel.img"
        # What this code puts on the ESP is part of it too: an image made with an older
        # embedded config must not be reused.
        fields.update(firmware=firmware, arch=arch,
                      grub=file_digest(kernel) if kernel.is_file() else None,
                      esp={"size": Layout(firmware).esp_size, "modules": list(efi.MODULES),
                           "config": efi.embedded_config("BOOT-UUID")})
    if secure_boot:
        # The signed files are the commit's (its id is above); where they go is this code's.
        fields.update(secure_boot={"chain": efi.SIGNED_CHAIN[arch],
                                   "config": efi.chain_config("BOOT-UUID")})
    return hashlib.sha256(canonical_json(fields)).hexdigest()


def _existing(manifest: Path, identity: str) -> DiskImage | None:
    try:
        record = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    raw = Path(record.get("raw", ""))
    if record.get("identity") != identity or not raw.is_file():
        return None
    qcow2 = Path(record["qcow2"]) if record.get("qcow2") else None
    return DiskImage(raw, qcow2, manifest, record["commit"], record["boot_uuid"],
                     record["root_uuid"], record["size"], built=False,
                     firmware=record.get("firmware", "bios"),
                     secure_boot=record.get("secure_boot", False))


def _jsonable(image: DiskImage) -> dict[str, object]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(image).items()
            if k != "built"}


def _make_disk(runner: Runner, disk: Path, work: Path, *, stage: Path,
               uuids: tuple[str, str], identity: str, epoch: int, layout: Layout,
               arch: str, deployed: Path, secure_boot: bool) -> int:
    """Partition `disk` and fill it: GRUB, /boot from work/boot, the root from `stage`."""
    clamp_times(work / "boot", epoch)
    clamp_times(stage, epoch)
    used = sum(p.lstat().st_size for p in stage.rglob("*") if p.is_file())
    root_size = max(MIN_ROOT, -(-(2 * used + 512 * MiB) // (256 * MiB)) * 256 * MiB)
    boot_img, root_img = work / "boot.ext4", work / "root.ext4"
    _mkfs(runner, boot_img, BOOT_SIZE, source=work / "boot", label="boot", fs_uuid=uuids[0],
          epoch=epoch)
    _mkfs(runner, root_img, root_size, source=stage, label="root", fs_uuid=uuids[1],
          epoch=epoch)
    parts = [(boot_img, layout.boot_offset), (root_img, layout.root_offset)]
    if layout.esp_size:
        esp_img = work / "esp.vfat"
        efi.make_esp(runner, esp_img, layout.esp_size,
                     tree=efi.esp_tree(runner, arch, work, uuids[0], deployed,
                                       secure_boot=secure_boot),
                     volume_id=esp_volume_id(identity), epoch=epoch)
        parts.insert(0, (esp_img, FIRST_SECTOR * 512))
    size = layout.disk_size(root_size)
    with disk.open("wb") as handle:
        handle.truncate(size)
    runner.run(["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", str(disk)],
               input=layout.table(identity, root_size).encode())
    for image, offset in parts:
        runner.run(["dd", f"if={image}", f"of={disk}", "bs=1M", f"seek={offset}",
                    "oflag=seek_bytes", "conv=notrunc,sparse", "status=none"])
        image.unlink()
    if layout.firmware == "bios":
        core = make_core_image(runner, work / "core.img", "(hd0,msdos1)/grub2")
        install_bios_boot(disk, core, FIRST_SECTOR)
    return size


def _mkfs(runner: Runner, image: Path, size: int, *, source: Path, label: str, fs_uuid: str,
          epoch: int) -> None:
    with image.open("wb") as handle:
        handle.truncate(size)
    proc = runner.run(["mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-L", label,
                       "-U", fs_uuid, "-E", f"root_owner=0:0,hash_seed={fs_uuid}",
                       "-d", str(source), str(image)],
                      env={"E2FSPROGS_FAKE_TIME": str(epoch)}, check=False)
    if proc.returncode != 0:
        raise BuildError(f"mke2fs could not make the {label} file system of {size // MiB} MiB "
                         f"from {source}: {proc.stderr.decode(errors='replace').strip()}")
    clamp_inode_times(runner, image, source, epoch)


def clamp_inode_times(runner: Runner, image: Path, source: Path, epoch: int) -> None:
    """mke2fs -d (e2fsprogs 1.47.0) copies each file's atime and ctime from the build host;
    set them to `epoch` in the image, once per inode, with debugfs. Inodes are named by
    number (debugfs follows symlinks given by path), read from the directories' listings."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(epoch))
    dirs = ["/" + p.relative_to(source).as_posix() for p in source.rglob("*")
            if p.is_dir() and not p.is_symlink()]
    listing = _debugfs(runner, image, [f'ls -l "{d}"' for d in ["/", *dirs]], epoch)
    inodes = sorted({int(line.split()[0]) for line in listing.splitlines()
                     if line.strip() and line.split()[0].isdigit()})
    _debugfs(runner, image, [f"set_inode_field <{ino}> {field} {stamp}"
                             for ino in inodes for field in ("atime", "ctime")], epoch,
             write=True)


def _debugfs(runner: Runner, image: Path, commands: list[str], epoch: int, *,
             write: bool = False) -> str:
    for command in commands:
        if "\n" in command or command.count('"') > 2:
            raise BuildError(f"{command!r}: a file name debugfs cannot be given")
    script = image.with_name(image.name + ".debugfs")
    script.write_text("\n".join(commands) + "\n")
    proc = runner.run(["debugfs", *(["-w"] if write else []), "-f", str(script), str(image)],
                      env={"E2FSPROGS_FAKE_TIME": str(epoch)}, check=False)
    script.unlink()
    errors = [line for line in proc.stderr.decode(errors="replace").splitlines()
              if line.strip() and not line.startswith("debugfs ")]
    if proc.returncode != 0 or errors:
        raise BuildError(f"debugfs failed on {image.name}: " + "; ".join(errors[:3]))
    return proc.stdout.decode(errors="replace")


def clamp_times(root: Path, epoch: int) -> None:
    """Every file's mtime at most `epoch`, as SOURCE_DATE_EPOCH asks (ostree's objects are
    already at 0; what deploy wrote has the build's time)."""
    for path in (root, *root.rglob("*")):
        stat = path.lstat()
        if stat.st_mtime > epoch:
            os.utime(path, (epoch, epoch), follow_symlinks=False)
