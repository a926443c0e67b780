"""Core: what every stage uses and nothing stage-specific.

The one command runner (runner), typed errors (errors), nested timed progress (progress),
content-addressed steps and atomic writes (steps), strict YAML field readers (schema), Jinja
rendering (templates), the project's input paths (paths), a threaded HTTP server
(http_thread), and thin wrappers over the `ostree` and `gpg` tools (ostree, signing).

Imports: nothing else in builder.
"""
