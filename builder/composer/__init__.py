"""Remote backend: the same blueprint, composed by an Image Builder service (osbuild-composer).

Takes: DIR/blueprints/NAME.toml. Talks Weldr over a unix socket or TCP (client, transport),
drives push/depsolve/compose/wait/fetch (remote) and imports an edge-commit into
DIR/ostree/repo (importer), so publish and installer work as after a local compose.

Imports: builder.core.
"""
