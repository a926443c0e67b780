"""Blueprint stage: an image profile -> Image Builder blueprint TOML and its depsolved lock.

Takes: blueprints/profiles.yaml, blueprints/*.toml.j2, the release and DIR/repo. Produces:
DIR/blueprints/NAME.toml and NAME.ARCH.lock.json (build), after validation as osbuild would
(validate), the offline image-cache check (images) and a libsolv depsolve (depsolve).

Imports: builder.core, builder.release, builder.context.
"""
