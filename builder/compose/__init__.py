"""Compose stage (the local backend): blueprint + lock + base commit -> signed ostree commit.

Takes: DIR/blueprints/NAME.toml and NAME.ARCH.lock.json (inputs), the RPMs of DIR/repo and the base
commit (base). Produces: a commit on the image's ref in DIR/ostree/repo (commit), after
installing the RPMs and applying the ostree layout rules (rootfs), systemd presets (units),
the embedded container images (containers) and the blueprint's customizations.

Imports: builder.core, builder.release, builder.context, builder.blueprint (the profile's ref).
"""
