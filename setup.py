"""The one compiled piece: builder/delta/_bsdiff.c (bsdiff streams for ostree's static deltas).

Everything else is declared in pyproject.toml. It links libdivsufsort (ci/host-tools.txt:
libdivsufsort-dev on Debian, libdivsufsort-devel on Fedora) and needs a C compiler and the
Python headers, which ci/install-host-tools.sh installs before the project is.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("builder.delta._bsdiff", sources=["builder/delta/_bsdiff.c"],
                             libraries=["divsufsort"], extra_compile_args=["-O2"],
                             # Without a compiler the project still installs; the builder's
                             # delta generator then says in one line what is missing.
                             optional=True)])
