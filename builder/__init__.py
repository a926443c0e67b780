"""Image-build pipeline and RPM/ostree packager for MicroShift edge devices."""

__version__ = "0.1.0"
