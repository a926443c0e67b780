"""Benchmarks for microshift-edge-builder (`nox -s bench`); results go in docs/benchmarks.md."""
