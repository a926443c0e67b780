"""Components: MicroShift's side of the components.d plugin convention (seed 003).

Takes: an image tree and /etc/microshift/config.yaml (config). Runs the plugins in order with
the MICROSHIFT_* environment and collects their manifests (loader). On the device the same
code runs as /usr/bin/microshift-components from microshift-components.service (service),
packed into microshift-core as a zip application; it must run on Python 3.9.

Imports: builder.core.
"""
