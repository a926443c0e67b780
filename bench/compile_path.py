"""`python -m bench.compile_path REPO FROM|empty TO CACHE [JOBS]`: one delta from the builder's
compiler, in a process of its own so a benchmark can time it and read its peak memory the
way it reads ostree's. Prints the result as JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.delta.cache import PartCache
from builder.delta.compiler import DeltaRequest, compile_deltas
from builder.publish.delta_knobs import default_ceiling, machine_cores


def main(argv: list[str]) -> int:
    repo, source, target, cache = Path(argv[0]), argv[1], argv[2], Path(argv[3])
    jobs = int(argv[4]) if len(argv) > 4 else machine_cores()
    [compiled] = compile_deltas([DeltaRequest(repo, None if source == "empty" else source,
                                              target)],
                                Runner(), PartCache(cache), Progress(stream=sys.stderr),
                                jobs=jobs, ceiling=default_ceiling())
    print(json.dumps({"directory": str(compiled.directory), "pieces": asdict(compiled.pieces)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
