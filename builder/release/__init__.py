"""Release: release.yaml, read and validated before any work.

Takes: release.yaml. Produces: the typed `Release` (model), the component catalog and its
conflict slots (catalog), the `ostree:` section (ostree_config), what templates see of the
release (template_context) and the deterministic SAMPLE inputs (samples).

Imports: builder.core.
"""
