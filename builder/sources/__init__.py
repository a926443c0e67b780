"""Sources: what a release names, made concrete for a build.

Takes: the validated `Release` (builder/release, which only reads and validates).
Produces: each container image resolved per architecture from its pinned reference
(`platforms.py`, skopeo), and the deterministic SAMPLE inputs of the sample flow: OCI images
and the stand-in `microshift` payload (`samples.py`). Used by the stages that consume them:
rpm (the payload), blueprint (image digests per architecture), compose (image copies),
device (the SAMPLE payload of its commits).
"""
