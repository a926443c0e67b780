"""Image mode: every image of a release also as a bootc container image.

Takes: the image's commit in DIR/ostree/repo (the tree is the commit's, not a second
depsolve), the previous release's layer plan. Produces: DIR/bootc/NAME/ (an OCI image
layout, one image per architecture under one index), its layer plan and report; pushed to
a registry and signed by `publish --registry` (builder/bootc/registry.py).
"""
