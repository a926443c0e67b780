"""Update scenarios on a virtual machine: the pipeline's own disk image booted under QEMU,
updated by its own microshift-update from the build's published layout, judged by
greenboot under systemd, rolled back by GRUB."""
