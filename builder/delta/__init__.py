"""The static delta compiler: ostree's delta format, made by the builder.

- `layout.py`: which objects a path carries, how (bsdiff or whole), cut into parts that are
  the same wherever the same objects travel;
- `parts.py`: one part, as ostree's generator makes it (`bsdiff.py`: the streams, from the
  C extension `_bsdiff.c`; `objects.py`: the archive repository's objects);
- `cache.py`: parts kept by identity, bounded; `superblock.py`: a delta written whole;
- `compiler.py`: many paths at once, each part made once, on the cores, within memory.

builder/publish/generate.py drives it for the delta stage; stock ostree applies what it
writes (tests/delta/test_compiler.py).
"""
