"""Components: MicroShift's side of the components.d plugin convention (seed 003).

Takes: an image tree and /etc/microshift/config.yaml (config). Runs the plugins in order with
the MICROSHIFT_* environment and collects their manifests (loader).

Imports: builder.core.
"""
