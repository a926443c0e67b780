"""microshift-update: the device's over-the-air updater (shipped as /usr/bin/microshift-update).

Device-side code: runs on the device's Python 3.9 with the standard library and PyYAML only.
`builder.updater.update_model` is the exception: the builder's pydantic model of update.yaml, for
the JSON Schema and the tests; the device never imports it.
"""
