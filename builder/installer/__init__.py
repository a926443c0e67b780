"""Installer stage: a composed commit -> kickstarts and the installer ISO.

Takes: DIR/blueprints/NAME.toml and the commit in DIR/ostree/repo. Produces:
DIR/kickstart/NAME-{network,embedded}.ks (kickstart, media) and DIR/installer/NAME.iso with its
manifest (iso, bootiso for RHEL boot ISOs).

Imports: builder.core, builder.release, builder.context, builder.compose (the image's ref),
builder.components (the strict MicroShift config check).
"""
