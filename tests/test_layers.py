"""The import graph between arena's subpackages (issue 27 item 1).

Every module of ``arena`` and ``adapters`` is parsed; its imports become edges between
*parts*: a subpackage (``arena/views/...`` is ``views``), a top-level module
(``arena/config.py`` is ``config``), the package ``arena/__init__.py`` (``arena``) and
the ``adapters`` package.

:data:`LAYERS` orders the parts. Every module-level import (those under
``if TYPE_CHECKING:`` included) goes to the importer's own part or to one listed before
it. Imports inside functions are scanned too: one that goes upward must be listed in
:data:`UPWARD_IN_FUNCTIONS` with its reason (moving an import into a function does not
hide it). The C extension modules are placed too: each is declared in setup.py under the
name of its path, its imports (the arena modules its strings name, the headers it
includes) go down the layers, and it names no field of a higher layer's classes unless
:data:`C_FIELDS_FROM_ABOVE` says why. docs/architecture.md describes the layers.
"""

from __future__ import annotations

import ast
import re
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


# ---------------------------------------------------------------- the C extension modules
# Issue 27 item 1 for the compiled modules: each is declared in setup.py under the name of
# its path (arena/slots/_growth.c is arena.slots._growth: part slots), and what it imports
# (a module named in a string, PyImport_ImportModule's or PyCapsule_Import's, and the
# headers it includes) goes down the layers too. Beyond imports, a C module is handed
# classes and reads their fields by name: a lower layer's C that names the fields of a
# higher layer's objects knows that layer (arena/memory/_host.c named the Slot's, Buffer's
# and Governor's until a slot's compiled growth moved to arena/slots/_growth.c).

_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_C_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _c_files() -> list[Path]:
    return sorted(p for ext in ("*.c", "*.h") for p in (ROOT / "arena").rglob(ext))


def c_strings(source: str) -> list[str]:
    """The string literals of C ``source``, comments left out."""
    return _C_STRING.findall(_C_COMMENT.sub(" ", source))


def declared_extensions() -> dict[str, list[str]]:
    """setup.py's ``Extension(name, sources, ...)`` calls: name -> sources."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            name, sources = (ast.literal_eval(arg) for arg in node.args[:2])
            found[name] = sources
    return found


def c_edges(files: dict[str, str] | None = None) -> set[tuple[str, str, str]]:
    """(importer part, imported part, what) of every C file's imports: an ``arena.``
    module named in a string (the longest prefix that is a module, a .c file or a
    package), and an included header of arena. ``files``: path relative to ROOT -> text
    (by default every .c and .h file of arena)."""
    if files is None:
        files = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _c_files()}
    edges = set()
    for name, text in files.items():
        path = ROOT / name
        source = _part(_module_name(path))
        targets = []
        for literal in c_strings(text):
            names = literal.split(".")
            if names[0] != "arena" or not all(n.isidentifier() for n in names):
                continue
            for end in range(len(names), 0, -1):
                candidate = ROOT.joinpath(*names[:end])
                if (
                    any(candidate.with_suffix(suffix).is_file() for suffix in (".py", ".c"))
                    or candidate.is_dir()
                ):
                    targets.append((".".join(names[:end]), literal))
                    break
        for header in _C_INCLUDE.findall(text):
            included = (path.parent / header).resolve()
            if included.is_relative_to(ROOT / "arena"):
                targets.append((_module_name(included), header))
        for module, what in targets:
            part = _part(module)
            if part is not None and source is not None and part != source:
                edges.add((source, part, what))
    return edges


def test_every_c_file_is_an_extension_named_for_its_path() -> None:
    """A C module's part is the folder it lies in: setup.py declares it under that name
    (so ``arena.slots._growth`` is of the slots layer), and every .c file of arena is
    built by one extension."""
    declared = declared_extensions()
    assert declared, "no Extension(...) found in setup.py"
    for name, sources in declared.items():
        assert sources == [name.replace(".", "/") + ".c"], (name, sources)
        assert _part(name) in ORDER, f"{name} is in no layer"
    built = {s for sources in declared.values() for s in sources}
    on_disk = {str(p.relative_to(ROOT)) for p in _c_files() if p.suffix == ".c"}
    assert on_disk == built, f"C files no extension builds: {sorted(on_disk - built)}"


def test_c_modules_import_down_the_layers() -> None:
    upward = sorted(e for e in c_edges() if _rank(e[1]) > _rank(e[0]))
    assert not upward, f"C modules importing a part listed after their own: {upward}"
    cycles = cycle_edges(import_edges() | {(a, b) for a, b, _ in c_edges()})
    assert not cycles, f"import edges on a cycle, C modules counted: {sorted(cycles)}"


def test_the_c_import_reader_sees_imports() -> None:
    """The slot's compiled growth imports the memory layer's C-API (its header, which
    names the capsule it imports), the region hits the views layer's; a planted upward
    import is seen."""
    assert ("slots", "memory", "../memory/_host_api.h") in c_edges()
    assert ("planning", "views", "../views/_hit_api.h") in c_edges()
    assert ("planning", "views", "arena.views._hit") in c_edges()
    planted = {
        "arena/memory/_planted.c": '#include "../views/_x.h"\n'
        '/* "arena.views._hit" in a comment is no import */\n'
        'PyObject *m = PyImport_ImportModule("arena.slots.slot");\n'
    }
    assert c_edges(planted) == {
        ("memory", "views", "../views/_x.h"),
        ("memory", "slots", "arena.slots.slot"),
    }


def _word(node: ast.AST) -> str | None:
    """The name a node of Python code uses, if it uses one."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, (ast.arg, ast.keyword)):
        return node.arg
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    return None


def _vocabulary() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per part: the ``__slots__`` fields of its classes, and every name its Python code
    uses (names, attributes, arguments, keywords, definitions, module names) with them."""
    fields: dict[str, set[str]] = {}
    words: dict[str, set[str]] = {}
    for folder in ("arena", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            part = _part(_module_name(path))
            assert part is not None
            own = words.setdefault(part, set())
            own.update(_module_name(path).split("."))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                word = _word(node)
                if word:
                    own.add(word)
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.Assign) and any(
                            isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                        ):
                            names = ast.literal_eval(item.value)
                            names = (names,) if isinstance(names, str) else names
                            fields.setdefault(part, set()).update(
                                n for n in names if not n.startswith("__")
                            )
    return fields, words


def fields_from_above(source: str, part: str) -> list[tuple[str, str]]:
    """(name, part above) of every string in C ``source`` of ``part`` that is a field of a
    class of a part listed after ``part``, and no word of ``part`` or those before it."""
    fields, words = _vocabulary()
    rank = _rank(part)
    known = set().union(*(words.get(p, set()) | fields.get(p, set()) for p in ORDER[: rank + 1]))
    above: dict[str, str] = {}
    for later in ORDER[rank + 1 :]:
        for name in fields.get(later, ()):
            above.setdefault(name, later)
    return sorted({(s, above[s]) for s in c_strings(source) if s in above and s not in known})


# C modules that name the fields of a higher part's objects, each with its reason; keep it
# as small as it can be (and every entry still needed). Empty since the compiled step and
# scope hits moved from views/_hit.c to the planning layer (planning/_region_hit.c).
C_FIELDS_FROM_ABOVE: dict[tuple[str, str], str] = {}


def test_c_modules_name_no_fields_of_the_layers_above() -> None:
    found: dict[tuple[str, str], list[str]] = {}
    for path in _c_files():
        name = str(path.relative_to(ROOT))
        part = _part(_module_name(path))
        assert part is not None
        for field, later in fields_from_above(path.read_text(encoding="utf-8"), part):
            found.setdefault((name, later), []).append(field)
    unlisted = {k: v for k, v in found.items() if k not in C_FIELDS_FROM_ABOVE}
    assert not unlisted, f"C modules that name fields of a layer above their own: {unlisted}"
    stale = sorted(set(C_FIELDS_FROM_ABOVE) - set(found))
    assert not stale, f"remove these from C_FIELDS_FROM_ABOVE, nothing names so: {stale}"


def test_the_c_field_finder_sees_a_lower_layer_writing_the_slot() -> None:
    """The slot's growth as the memory layer's C once held it is found; in the slots
    layer it is the Slot's own."""
    planted = 'static const char *names[] = {"high_water", "_siblings", "scratch_name"};'
    assert fields_from_above(planted, "memory") == [
        ("_siblings", "slots"),
        ("high_water", "slots"),
        ("scratch_name", "slots"),
    ]
    assert fields_from_above(planted, "slots") == []


# Issue 27 item 3 for the compiled modules: a C module above the slots layer reads the
# fields of a slot, its region stack, buffer or governor at their offsets (as every layer
# may read), but stores into none of them: what it changes, it asks of the slots layer's
# C-API (arena/slots/_slot_api.h, the Slot's and RegionStack's own stores in
# arena/slots/_slot.c), as Python code above calls the Slot's methods. Its offsets are
# named for their class (``slot_calls``, ``stack_top``, ``buffer_prepared``,
# ``governor_locked``); a store is one through ``FIELD(obj, offset)`` (assigned, its
# address taken, passed to Py_SETREF, Py_XSETREF or Py_CLEAR) or ``field_write(obj,
# offset, ...)`` (arena/base/_fields.h). The offsets the C-API's table holds for its
# header's inline stores (``calls_at``, ``top_at``, ``live_at``, read through
# ``ARENA_SLOT_AT``) are the header's alone: a module above that names one is refused too.
# No exception is listed: none is needed.
_SLOTS_OFFSET = r"(?:slot|stack|buffer|governor)_\w+"
_FIELD_AT = r"FIELD\(\s*[^,;]+?\s*,\s*(" + _SLOTS_OFFSET + r")\s*\)"
_C_SLOT_STORES = (
    re.compile(r"(?:^|[(,=?:])\s*&\s*" + _FIELD_AT, re.M),  # an address, not a "&&"
    re.compile(_FIELD_AT + r"\s*(?:[-+*/|&^]?=(?!=)|\+\+|--)"),
    re.compile(r"\b(?:Py_X?SETREF|Py_X?CLEAR)\(\s*" + _FIELD_AT),
    re.compile(r"\bfield_write\(\s*[^,;]+?,\s*(" + _SLOTS_OFFSET + r")\s*,"),
    re.compile(r"\b(ARENA_SLOT_AT|calls_at|top_at|live_at)\b"),
)


def c_slot_stores(source: str) -> list[tuple[int, str]]:
    """(line, offset) of every store in C ``source`` into a field at an offset named for a
    class of the slots layer; comments are left out (their lines kept)."""
    text = _C_COMMENT.sub(lambda m: "\n" * m.group().count("\n") or " ", source)
    found = set()
    for pattern in _C_SLOT_STORES:
        for match in pattern.finditer(text):
            found.add((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return sorted(found)


def test_c_modules_above_the_slots_layer_store_into_no_slot_field() -> None:
    stores = []
    for path in _c_files():
        part = _part(_module_name(path))
        assert part is not None
        if _rank(part) <= _rank("slots"):
            continue
        for line, offset in c_slot_stores(path.read_text(encoding="utf-8")):
            stores.append(f"{path.relative_to(ROOT)}:{line} stores at {offset}")
    assert not stores, (
        "only the slots layer writes its fields (issue 27): call the slots layer's C-API "
        f"(arena/slots/_slot_api.h) instead: {stores}"
    )


def test_the_c_slot_store_finder_sees_stores() -> None:
    """The stores the compiled hit made before the slots layer's C-API are found; reads,
    and stores into the fields of a class of another layer, are not."""
    planted = (
        "FIELD(slot, slot_calls) = more;\n"
        "put(&FIELD(slot, slot_calls), calls);\n"
        "store(&stores, &FIELD(first.stack, stack_top), end);\n"
        "Py_SETREF(FIELD(v->slot, slot_load), live);\n"
        "field_write(slot, slot_detour, one);\n"
        "if (FIELD(slot, slot_calls) == NULL && x & FIELD(s, slot_x)) return NULL;\n"  # reads
        "PyObject *top = FIELD(stack, stack_top), *b = FIELD(slot, slot_buffer);\n"
        "keep(&FIELD(entry, prepared_used), Py_True);\n"  # a Prepared's (views)
        "/* FIELD(slot, slot_calls) = more; */\n"  # a comment
        "FIELD(buffer, buffer_captured) = Py_True; FIELD(g, governor_locked) = x;\n"
        "ARENA_SLOT_AT(slot, slot_api->calls_at) = more;\n"  # the C-API header's own
        "arena_slot_count_call(slot_api, slot);\n"  # the C-API's store: asked for
    )
    assert c_slot_stores(planted) == [
        (1, "slot_calls"),
        (2, "slot_calls"),
        (3, "stack_top"),
        (4, "slot_load"),
        (5, "slot_detour"),
        (10, "buffer_captured"),
        (10, "governor_locked"),
        (11, "ARENA_SLOT_AT"),
        (11, "calls_at"),
    ]


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
    assert fields == {"regions", "top", "live", "below"}
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
