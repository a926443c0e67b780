"""Remote backend: the same blueprint, composed by an Image Builder service (osbuild-composer).

Takes: DIR/blueprints/NAME.toml and the release. Talks Weldr over a unix socket or TCP
(client, transport); picks the image type the service offers and builds the request
(request); checks, trims and syncs the blueprint without version drift (blueprints); drives
compose/wait/fetch (remote, wait, results); serves DIR/ostree/repo to the workers (serve);
and publishes the service's commit into DIR/ostree/repo as the release's commit, chained to
the previous one (importer), so publish and installer work as after a local compose.

Imports: builder.compose (the image's default ref), builder.blueprint (the blueprint version
of a release), builder.release, builder.core.
"""
