"""No import cycles among a package's modules, counting imports inside functions.

import-linter (nox -s lint) holds the layers, but it reads only what Python runs at import
time; an import inside a function is how a cycle hides. This reads every import statement
of every module, wherever it is, and fails on each strongly connected set of modules.

    python ci/import_cycles.py [PACKAGE_DIR]     (default: builder)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules `path` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {_owner(target, known) for target in found} - {"", name}


def _owner(target: str, known: set[str]) -> str:
    """The package module a dotted name lives in (a name imported from it is not one)."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def graph(root: Path) -> dict[str, set[str]]:
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(paths)
    edges = {name: imports_of(path, name, known) for name, path in paths.items()}
    # A package's __init__ is imported with each of its modules: not an edge that cycles.
    return {name: {t for t in targets if not name.startswith(t + ".")}
            for name, targets in edges.items()}


def cycles(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                yield from visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                yield sorted(members)

    for node in sorted(edges):
        if node not in index:
            yield from visit(node)


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "builder").resolve()
    sys.setrecursionlimit(10_000)
    found = list(cycles(graph(root)))
    for members in found:
        print(f"import cycle (counting imports inside functions): {' <-> '.join(members)}")
    if not found:
        print(f"{root.name}: no import cycles, counting imports inside functions")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
