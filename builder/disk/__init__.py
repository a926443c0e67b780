"""Disk images: an image's commit deployed on a bootable disk, as Image Builder's
edge-raw-image gives users to flash (DIR/disk/NAME.ARCH.raw and .qcow2)."""
