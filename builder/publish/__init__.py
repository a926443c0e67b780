"""Publish stage: a ref's commits -> static deltas, offline delta files and update reports.

Takes: DIR/ostree/repo. Produces: deltas and the summary in DIR/ostree/repo, and
DIR/deltas/REF/ (report.json, report.txt, FROM-TO.delta, index.json; docs/offline-deltas.md).

Imports: builder.core, builder.release, builder.context, builder.compose (the image's ref).
"""
