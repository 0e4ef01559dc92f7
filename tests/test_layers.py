"""The import graph between arena's subpackages (issue 27 item 1).

Every module of ``arena`` and ``adapters`` is parsed; its imports become edges between
*parts*: a subpackage (``arena/views/...`` is ``views``), a top-level module
(``arena/config.py`` is ``config``), the package ``arena/__init__.py`` (``arena``) and
the ``adapters`` package.

:data:`LAYERS` orders the parts. Every module-level import (those under
``if TYPE_CHECKING:`` included) goes to the importer's own part or to one listed before
it. Imports inside functions are scanned too: one that goes upward must be listed in
:data:`UPWARD_IN_FUNCTIONS` with its reason (moving an import into a function does not
hide it). docs/architecture.md describes the layers.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Issue 27 item 1: arena's parts in layers, each importing only those before it. A part
# may import its own modules and any part listed before it (within a layer too, in the
# order given); never one after it. So no cycle can run between parts.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Layout arithmetic, dtypes, poison values, events, errors and small helpers.
    ("base", ("errors", "environment", "forks", "uncopyable", "base")),
    # Memory sources, devices and the ledger (adapters sit here too: base and memory).
    ("memory", ("memory", "adapters")),
    # The validated settings. Not in the base layer: settings name a device and a memory
    # source (arena.memory.devices, arena.memory.sources), so they sit right above memory
    # and below everything that is configured by them.
    ("config", ("config",)),
    # A slot's buffer and its grow / retire / capture protocol, the governor, the slot
    # table and the per-slot stores; features above register lock hooks with the table.
    ("slots", ("slots",)),
    # Prepared views, the hit paths, the miss path's builder, the request log.
    ("views", ("views",)),
    # Scopes, steps, step books and offset planning.
    ("planning", ("planning",)),
    # Profiles, statistics, snapshots (observe reads what slots and planning keep), then
    # the kernel libraries' workspaces, Triton's allocator, budgets and memory_stats()
    # (which sums observe's snapshot segments).
    ("features", ("observe", "kernels")),
    # Ranks agreeing on sizes (Arena.sync calls it).
    ("distributed", ("distributed",)),
    # The facade: Front, how an Arena is assembled, Arena, the process-wide arena, the
    # package itself.
    ("facade", ("front", "assembly", "core", "process", "_version", "arena")),
    # Above the library: the vLLM shim, the benchmarks and demos, the command line.
    ("above", ("compat", "tools", "__main__")),
)

#: Every part, lowest first.
ORDER: tuple[str, ...] = tuple(part for _, parts in LAYERS for part in parts)

# Imports of arena parts inside function bodies that go upward: each runs late on
# purpose, and each says why. Keep this list as small as it can be.
UPWARD_IN_FUNCTIONS: dict[tuple[str, str], str] = {}


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


def _function_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that are not :func:`_top_level_imports`: inside function or class bodies."""
    top = {id(node) for node in _top_level_imports(tree)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            yield node


def import_edges(*, function_level: bool = False) -> set[tuple[str, str]]:
    """Edges (importer part, imported part) between distinct parts: of the imports run at
    import time or under TYPE_CHECKING, or (``function_level``) of those inside
    functions."""
    edges = set()
    scan = _function_imports if function_level else _top_level_imports
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            importer = _module_name(path)
            source = _part(importer)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            package = path.name == "__init__.py"
            for node in scan(tree):
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


def _rank(part: str) -> int:
    assert part in ORDER, f"part {part!r} is in no layer: add it to LAYERS"
    return ORDER.index(part)


def test_every_import_goes_to_its_own_part_or_an_earlier_one() -> None:
    """Module-level and TYPE_CHECKING imports go down the layers, never up or sideways."""
    upward = sorted((a, b) for a, b in import_edges() if _rank(b) > _rank(a))
    assert not upward, (
        f"imports from a part to one listed after it in LAYERS (issue 27: layers import "
        f"only those before them): {upward}"
    )


def test_function_level_imports_go_down_too_unless_listed() -> None:
    """An import moved into a function body is still an edge: upward ones only where
    UPWARD_IN_FUNCTIONS names them with a reason (and every entry there is still used)."""
    upward = {(a, b) for a, b in import_edges(function_level=True) if _rank(b) > _rank(a)}
    unlisted = sorted(upward - set(UPWARD_IN_FUNCTIONS))
    assert not unlisted, f"upward imports inside functions, not allowed: {unlisted}"
    stale = sorted(set(UPWARD_IN_FUNCTIONS) - upward)
    assert not stale, f"remove these from UPWARD_IN_FUNCTIONS, nothing imports so: {stale}"


def test_no_import_cycle_between_parts() -> None:
    cycles = cycle_edges(import_edges() | import_edges(function_level=True))
    assert not cycles, f"import edges on a cycle between arena's parts: {sorted(cycles)}"


def test_the_layers_name_every_part_once() -> None:
    assert len(ORDER) == len(set(ORDER))
    found = {a for edge in import_edges() for a in edge}
    assert found <= set(ORDER), f"parts in no layer: {sorted(found - set(ORDER))}"


# The base layer: parts that import no other part of arena but each other.
BASE_PARTS = frozenset({"base", "errors", "environment", "forks", "uncopyable"})


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


# ---------------------------------------------------------------- the Slot writes itself
# Issue 27 item 3: only the Slot's own methods write its fields. Elsewhere a slot goes by
# these names (a local, an attribute holding one); an assignment, augmented assignment,
# subscript assignment or del through one of them to a Slot field is refused.
_SLOT_NAMES = ("slot", "s", "sibling", "other")


def _slot_fields(path: str = "arena/slots/slot.py", name: str = "Slot") -> frozenset[str]:
    """The ``__slots__`` of class ``name`` in ``path`` (the Slot's by default)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    names = ast.literal_eval(item.value)
                    return frozenset(n for n in names if not n.startswith("__"))
    raise AssertionError(f"no {name}.__slots__ in {path}")


def _names_a_slot(node: ast.expr) -> bool:
    """``slot``, ``self.slot``, ``self._slot``, ``region.slot``, ``slots[i]``, ..."""
    if isinstance(node, ast.Subscript):
        node = node.value
        return _names_a_slot(node) or (isinstance(node, ast.Name) and node.id == "slots")
    if isinstance(node, ast.Name):
        return node.id in _SLOT_NAMES or node.id.endswith("_slot")
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_") in ("slot", "only") or node.attr.endswith("_slot")
    return False


def _names_a_stack(node: ast.expr) -> bool:
    """``stack``, ``slot.stack``, ``self.stack``, ``region_stack``, ..."""
    if isinstance(node, ast.Name):
        return node.id == "stack" or node.id.endswith("_stack")
    if isinstance(node, ast.Attribute):
        return node.attr == "stack"
    return False


def _anything(node: ast.expr) -> bool:
    """Every object: a field name no other object of the package has."""
    return True


def slot_writes(
    source: str, fields: frozenset[str], names: Callable[[ast.expr], bool] = _names_a_slot
) -> list[tuple[int, str]]:
    """(line, field) of every write to one of ``fields`` in ``source`` through an object
    that ``names`` takes for the owner (by default: a slot)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        else:
            continue
        pending = targets
        while pending:
            target = pending.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                pending += target.elts
                continue
            if isinstance(target, ast.Subscript):  # slot.stores[key] = ..., del slot.x[i]
                target = target.value
            if isinstance(target, ast.Attribute) and target.attr in fields and names(target.value):
                found.append((node.lineno, target.attr))
    return found


def test_only_the_slot_writes_its_fields() -> None:
    fields = _slot_fields()
    writes = []
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "arena/slots/slot.py":
                continue
            for line, field in slot_writes(path.read_text(encoding="utf-8"), fields):
                writes.append(f"{path.relative_to(ROOT)}:{line} writes slot.{field}")
    assert not writes, f"only the Slot's own methods write its fields (issue 27): {writes}"


def test_the_slot_write_finder_sees_writes() -> None:
    fields = _slot_fields()
    assert {"load", "plain_high", "stores", "calls", "stack", "buffer"} <= fields
    # The step books live in the steps feature's store (arena.planning.books), the open
    # regions in the slot's region stack (arena.slots.stack): not here.
    assert not {"steps", "regions", "top", "live"} & fields
    planted = (
        "slot.load = 1\n"
        "self.slot.calls += 2\n"
        "slot.stores[key] = book\n"
        "del sibling.pending\n"
        "a, s.plain_high = 1, 2\n"
        "self.load = 3\n"  # the object's own field: not a slot's
        "slot.note_plain(4)\n"
    )
    assert slot_writes(planted, fields) == [
        (1, "load"),
        (2, "calls"),
        (3, "stores"),
        (4, "pending"),
        (5, "plain_high"),
    ]


# Issue 27 item 3: the region stack (arena/slots/stack.py) and the step books
# (arena/planning/books.py) are objects of their own, written by their own methods only.
def test_only_the_region_stack_writes_its_fields() -> None:
    fields = _slot_fields("arena/slots/stack.py", "RegionStack")
    assert fields == {"regions", "top", "live"}
    writes = []
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "arena/slots/stack.py":
                continue
            for line, field in slot_writes(
                path.read_text(encoding="utf-8"), fields, _names_a_stack
            ):
                writes.append(f"{path.relative_to(ROOT)}:{line} writes stack.{field}")
    assert not writes, f"only the RegionStack's own methods write its fields: {writes}"


def test_only_the_step_books_rebind_their_mapping() -> None:
    fields = _slot_fields("arena/planning/books.py", "StepBooks")
    assert fields == {"by_key"}
    writes = []
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "arena/planning/books.py":
                continue
            for line, field in slot_writes(path.read_text(encoding="utf-8"), fields, _anything):
                writes.append(f"{path.relative_to(ROOT)}:{line} writes {field}")
    assert not writes, f"only the StepBooks' own methods write its mapping: {writes}"


def test_the_stack_write_finder_sees_writes() -> None:
    fields = _slot_fields("arena/slots/stack.py", "RegionStack")
    planted = (
        "slot.stack.top = 1\n"
        "stack.live += 2\n"
        "self.slot.stack.regions = []\n"
        "outer_stack.regions[0] = r\n"
        "self.top = 3\n"  # the object's own field: not a stack's
        "slot.stack.account(4, 5)\n"
    )
    assert slot_writes(planted, fields, _names_a_stack) == [
        (1, "top"),
        (2, "live"),
        (3, "regions"),
        (4, "regions"),
    ]
    books = _slot_fields("arena/planning/books.py", "StepBooks")
    assert slot_writes("step_books(s).by_key[k] = b\nx = s.by_key\n", books, _anything) == [
        (1, "by_key")
    ]
