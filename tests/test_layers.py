"""The import graph between arena's subpackages (issue 27 item 1).

Every module of ``arena`` and ``adapters`` is parsed; its module-level imports, those
under ``if TYPE_CHECKING:`` included (imports inside functions are not edges: they run
late, on purpose), become edges between *parts*: a subpackage (``arena/views/...`` is
``views``), a top-level module (``arena/config.py`` is ``config``), the facade
``arena/__init__.py`` (``arena``) and the ``adapters`` package.

Issue 27 asks for layers without cycles between them. Today one cycle runs through most
parts; its edges are listed in :data:`KNOWN_CYCLE_EDGES`. The test fails on a NEW edge
inside a cycle, and on a listed edge that no longer closes a cycle (remove it from the
list: the list only shrinks, to empty when the layers are done).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Issue 27 item 1: the edges (importer part, imported part) that lie on an import cycle
# between parts at the time the layering test was written (27 edges through config,
# kernels, memory, observe, planning, slots and views; 15 once layout, dtypes, poison and
# events moved to the base layer). Shrink this list; never grow it.
KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        ("kernels", "observe"),
        ("kernels", "planning"),
        ("kernels", "slots"),
        ("observe", "slots"),
        ("planning", "observe"),
        ("planning", "slots"),
        ("planning", "views"),
        ("slots", "kernels"),
        ("slots", "observe"),
        ("slots", "planning"),
        ("slots", "views"),
        ("views", "kernels"),
        ("views", "observe"),
        ("views", "planning"),
        ("views", "slots"),
    }
)


def _part(module: str) -> str | None:
    """The part a dotted module name belongs to, or None outside arena and adapters."""
    names = module.split(".")
    if names[0] == "adapters":
        return "adapters"
    if names[0] != "arena":
        return None
    if len(names) == 1:
        return "arena"
    return names[1]


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    names = list(relative.parts)
    if names[-1] == "__init__":
        names.pop()
    return ".".join(names)


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run at import time or under ``TYPE_CHECKING``: module level, inside
    ``if``/``try``/``with`` blocks at module level, not inside functions or classes."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                pending += handler.body
        elif isinstance(node, ast.With):
            pending += node.body


def _targets(node: ast.Import | ast.ImportFrom, importer: str, package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = importer.split(".")
        if not package:
            anchor = anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    targets = []
    for alias in node.names:
        # ``from arena import errors`` imports the module arena.errors: its part is errors.
        candidate = f"{base}.{alias.name}"
        folder = ROOT.joinpath(*candidate.split("."))
        if folder.is_dir() or folder.with_suffix(".py").is_file():
            targets.append(candidate)
        else:
            targets.append(base)
    return targets


def import_edges() -> set[tuple[str, str]]:
    """Edges (importer part, imported part) between distinct parts."""
    edges = set()
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            importer = _module_name(path)
            source = _part(importer)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            package = path.name == "__init__.py"
            for node in _top_level_imports(tree):
                for target in _targets(node, importer, package):
                    part = _part(target)
                    if part is not None and source is not None and part != source:
                        edges.add((source, part))
    return edges


def cycle_edges(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges that lie on a cycle: both ends in one strongly connected component."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())

    def reach(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            for nxt in graph[node]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    reachable = {node: reach(node) for node in graph}
    return {(a, b) for a, b in edges if a in reachable[b]}


def test_no_new_import_cycle_between_parts() -> None:
    cycles = cycle_edges(import_edges())
    new = sorted(cycles - KNOWN_CYCLE_EDGES)
    assert not new, (
        f"new import edges on a cycle between arena's parts (issue 27: layers import only "
        f"those before them): {new}"
    )
    gone = sorted(KNOWN_CYCLE_EDGES - cycles)
    assert not gone, f"these edges no longer close a cycle: remove them from the list: {gone}"


# The base layer: parts that import no other part of arena but each other.
BASE_PARTS = frozenset({"base", "errors", "ints", "environment", "forks", "uncopyable"})


def test_the_base_layer_imports_nothing_above_it() -> None:
    """Layout arithmetic, dtypes, poison values, events and the small top-level helpers
    import only one another (issue 27 item 1: the first layer)."""
    above = sorted((a, b) for a, b in import_edges() if a in BASE_PARTS and b not in BASE_PARTS)
    assert not above, f"the base layer imports a part above it: {above}"


def test_adapters_import_only_base_and_memory() -> None:
    """Issue 27 item 1: adapters build views from a buffer and import only the base layer
    and the memory layer (so a framework adapter never reaches slots, plans or the facade)."""
    allowed = BASE_PARTS | {"memory"}
    wrong = sorted((a, b) for a, b in import_edges() if a == "adapters" and b not in allowed)
    assert not wrong, f"adapters import parts other than base and memory: {wrong}"


def test_the_graph_reader_sees_imports() -> None:
    """The reader is not blind: known imports are edges, and a planted cycle is found."""
    edges = import_edges()
    assert ("adapters", "base") in edges  # adapters/torch.py: from arena.base.dtypes ...
    assert ("adapters", "errors") in edges
    assert cycle_edges({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == {
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    }
