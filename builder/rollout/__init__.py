"""Fleet rollouts, the admin's and the collector's side (devices: builder/updater/waves.py,
fleet.py, verdicts.py, outcome.py).

Takes: a published directory (SITE/updates/REF/timestamp.json, whose signed statement
carries the rollout) and the verdicts devices send. Produces: the statement re-signed at
every change (start, advance, halt, resume, the collector's automatic halt: admin), the
collector's SQLite state (store) with each verdict checked (verify), the HTTP collector and
`rollout collect` for verdict files (collector).

Imports: builder.publish, builder.updater, builder.core.
"""
