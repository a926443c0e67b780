"""The VM scenario `migrate`: an ostree device moves to image mode and back (issue 41).

The disk is installed from the ostree commit v1, as every ostree-mode scenario's. The
release's bootc image v1 is on the device as an OCI layout in /var (as an admin brings an
image to an air-gapped device on removable media: `bootc switch --transport oci` is bootc's
way to take it). A SAMPLE admin, a one-shot unit that runs after greenboot's green verdict,
does by hand what bootc's documentation tells an admin to do:

1. on the ostree deployment: writes a file in /etc, `bootc switch --transport oci` to the
   image, and reboots (the device's bootc stages it; greenboot arms the boot counter);
2. on the image: checks that the /etc change and MicroShift's data came along (ostree's
   3-way /etc merge, /var shared by the stateroot), `bootc rollback`, reboot;
3. on the ostree deployment again: nothing left to do (the scenario settles).

The boots are read from the console like every scenario's; the unit prints its steps there.
"""

from __future__ import annotations

from builder.vm.image_mode import ImagePair

ADMIN = "sample-admin"
LAYOUT = f"lib/{ADMIN}/image"        # under /var: the image the admin brought
ETC_NOTE = f"{ADMIN}/note"           # under /etc: what the admin changed before migrating
NOTE_TEXT = "written on the ostree deployment before the switch\n"
SAY_KEPT = "the image sees the ostree deployment's /etc change and MicroShift's data"
SAY_DONE = "done: nothing left to do"

SCRIPT = f"""#!/bin/sh
# SAMPLE admin of the VM scenario `migrate` (builder/vm/migration.py): what an admin types.
set -u
state=/var/lib/{ADMIN}
say() {{ echo "{ADMIN}: $*"; }}
booted() {{
    bootc status --json | python3 -c 'import json, sys
b = json.load(sys.stdin)["status"]["booted"]
print("image" if b and b.get("image") else "ostree")'
}}
if [ ! -e "$state/switched" ]; then
    printf '%s' '{NOTE_TEXT.strip()}' > /etc/{ETC_NOTE} && echo >> /etc/{ETC_NOTE}
    bootc switch --transport oci "/var/{LAYOUT}" || {{ say "failed: bootc switch"; exit 1; }}
    touch "$state/switched"
    say "switched to the image; rebooting"
    systemctl reboot
elif [ "$(booted)" = image ] && [ ! -e "$state/rolled-back" ]; then
    if grep -q 'before the switch' /etc/{ETC_NOTE} && [ -s /var/lib/microshift/marker ]; then
        say "{SAY_KEPT}"
    fi
    bootc rollback || {{ say "failed: bootc rollback"; exit 1; }}
    touch "$state/rolled-back"
    say "rolled back; rebooting"
    systemctl reboot
else
    say "{SAY_DONE}"
fi
"""

UNIT = f"""[Unit]
Description=SAMPLE admin: migrate this ostree device to its release's image, then roll back
# Only after a green boot, as an admin acts on a healthy device.
Requires=greenboot-healthcheck.service
After=greenboot-healthcheck.service greenboot-grub2-set-success.service microshift.service

[Service]
Type=oneshot
ExecStart=/bin/sh /etc/{ADMIN}/migrate.sh
StandardOutput=journal+console
StandardError=journal+console
""".encode()


def admin_etc() -> tuple[dict[str, bytes], dict[str, str]]:
    """The admin's script and unit in /etc, the unit wanted at every boot."""
    unit = f"systemd/system/{ADMIN}.service"
    return ({f"{ADMIN}/migrate.sh": SCRIPT.encode(), unit: UNIT},
            {f"systemd/system/multi-user.target.wants/{ADMIN}.service": f"/etc/{unit}"})


def image_on_device(images: ImagePair) -> dict[str, bytes]:
    """Image v1's OCI layout as files under /var/LAYOUT."""
    layout = images.images.single("v1")
    return {f"{LAYOUT}/{path.relative_to(layout)}": path.read_bytes()
            for path in sorted(layout.rglob("*")) if path.is_file()}
