"""Device simulation: an ostree sysroot in a directory, booted with greenboot's rules.

Takes: DIR/ostree/repo (or SAMPLE commits it builds, commits). Produces: a device directory
(sysroot) that installs, upgrades over a served repo (repo_server, netlink for throttled
links), boots with the shipped greenboot scripts against a stand-in API (boot, grubenv,
health_server), and runs whole update scenarios (scenarios).

Imports: builder.core, builder.release, builder.context.
"""
