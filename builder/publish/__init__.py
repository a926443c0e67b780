"""Publish stage: a ref's commits -> static deltas, update reports, SBOMs, the upload.

Takes: DIR/ostree/repo (the commits, their rpm databases and image stores) and
DIR/blueprints/NAME.ARCH.lock.json. Produces: deltas and the summary in DIR/ostree/repo,
DIR/deltas/REF/ (report.json, report.txt, FROM-TO.delta, index.json;
docs/offline-deltas.md), DIR/sbom/NAME.spdx.json, and the repository with its SBOMs and
reports uploaded to a target (`publish`).

Imports: builder.core, builder.release, builder.context, builder.compose (the image's ref,
the lock file).
"""
