"""bsdiff streams for ostree's BSPATCH operation, from the compiled builder/delta/_bsdiff.c.

`diff` makes the stream ostree's bundled bspatch (mendsley/bsdiff) applies: no header,
control triples with their diff and extra bytes. It builds the old file's suffix array with
libdivsufsort and matches fixed-size segments of the new file on several threads, so the
same inputs and segment size give the same bytes on any machine. Every stream is applied
back (`patch`, ostree's rules) and compared with the new file before it is used: a delta
never carries a stream that does not rebuild its object.
"""

from __future__ import annotations

from types import ModuleType

from builder.core.errors import BuildError

SEGMENT_BYTES = 16 << 20  # part of the stream's identity (cache keys name it)

_IMPORT_ERROR = ""
try:
    from builder.delta import _bsdiff
except ImportError as exc:  # the project was installed without building its extension
    _bsdiff = None  # type: ignore[assignment]
    _IMPORT_ERROR = str(exc)


def _module() -> ModuleType:
    if _bsdiff is None:
        raise BuildError(f"the bsdiff extension builder.delta._bsdiff is not built "
                         f"({_IMPORT_ERROR})",
                         hint="install the project again (`pip install -e .`) after "
                              "ci/install-host-tools.sh: it compiles with gcc, the Python "
                              "headers and libdivsufsort")
    return _bsdiff


def diff(old: bytes | memoryview, new: bytes | memoryview, threads: int = 1,
         segment_bytes: int = SEGMENT_BYTES) -> bytes:
    """The stream that turns `old` into `new`, checked by applying it."""
    module = _module()
    stream: bytes = module.diff(old, new, threads=threads, segment_bytes=segment_bytes)
    rebuilt: bytes = module.patch(old, stream, len(new))
    if rebuilt != new:
        raise BuildError("bsdiff made a stream that does not rebuild its file "
                         f"({len(old)} -> {len(new)} bytes)",
                         hint="report this with the two files; the delta was not written")
    return stream


def patch(old: bytes | memoryview, stream: bytes | memoryview, new_size: int) -> bytes:
    """`old` with `stream` applied as ostree applies it; ValueError for a bad stream."""
    result: bytes = _module().patch(old, stream, new_size)
    return result
