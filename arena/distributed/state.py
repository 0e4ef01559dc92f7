"""What one rank's arena contributes to :meth:`arena.Arena.sync`, and how it takes the
ranks' maxima back.

Entries (see :mod:`arena.distributed.wire`), each with the ints that merge by maximum:

* ``["config", ubatches, lanes, alignment]``: no ints; ranks that differ here cannot
  agree on slots and raise :class:`~arena.ArenaSyncError`, every one of them;
* ``["budget"]``: ``-max_bytes`` (``-(2**63 - 1)`` for no cap): the maximum of the
  negated caps is the smallest cap;
* ``["slot", index]``: capacity, the largest request outside every step (reserves and
  scopes included), the first size of Triton blocks;
* ``["step", index, key, counts, lasts, top_level]``: each block's size, the highest
  start, the bytes needed above (:mod:`arena.planning.agreed`);
* ``["workspace", index, key]``: a library workspace's bytes;
* ``["persistent", index, key, shape, dtype, zero_init]``: a persistent buffer's bytes.

A key travels as its ``repr``; a rank that lacks it rebuilds it with
:func:`ast.literal_eval` (str, int, float, bool, None and tuples of them). Any other key
is still sized by maximum on the ranks that have it; the others report it as not taken.
"""

from __future__ import annotations

import ast
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from arena.base.layout import compute_layout
from arena.distributed.wire import Exchange, encode_entry
from arena.errors import ArenaLockedError, ArenaSyncError
from arena.forks import after_fork
from arena.planning.agreed import agreed_book, step_figures, step_structure
from arena.planning.books import books_of, step_books
from arena.slots.persistent import PersistentStore
from arena.slots.slot import Resize, Slot
from arena.slots.table import SlotTable
from arena.slots.workspaces import LIBRARY, TRITON, WorkspaceStore

__all__ = ["SyncReport", "apply_maxima", "collect", "width"]

_NO_CAP = 2**63 - 1

#: One key rebuilt by ``literal_eval`` at a time in this process. CPython 3.11 up to
#: 3.11.7 and 3.12 up to 3.12.1 count the AST constructor's recursion in one field of the
#: interpreter (gh-106905, fixed in 3.11.8 and 3.12.2): a parse during which another
#: thread parses raises SystemError ("AST constructor recursion depth mismatch"), and a
#: collection inside a parse runs finalizers, which may hand the GIL to another thread.
#: Ranks run as threads of one process rebuild the others' keys at once, right after the
#: same collective. (Another library parsing in another thread at that moment can still
#: meet a parse here on those versions; only a newer CPython prevents that.)
_PARSING = threading.Lock()


def _renew_parsing(module: object) -> None:
    """A forked child's own lock (another thread may have held the parent's then)."""
    global _PARSING
    _PARSING = threading.Lock()


after_fork(sys.modules[__name__], _renew_parsing)


@dataclass(frozen=True)
class SyncReport:
    """What :meth:`arena.Arena.sync` did on this rank.

    Attributes
    ----------
    rank, world : int or None
        This rank and the number of ranks, where the group tells.
    before, after : tuple of int
        Every slot's capacity (ubatch-major) before and after the sync.
    partial : tuple of str
        Keys only some ranks had (every rank has them now), described.
    not_taken : tuple of str
        Keys another rank had that this rank could not take: a key ``literal_eval``
        cannot rebuild, a step running now, a persistent key with another shape here.
    max_bytes : int or None
        The arena's cap after the sync: the smallest over the ranks.
    schemas : int
        Distinct key schemas among the ranks (1: every rank had the same keys).
    payload_bytes : int
        Bytes this rank handed to the collectives.
    collectives : int
        Collectives run: 2 when every rank had the same keys, 4 otherwise, and on gloo
        the monitored barrier that opens the exchange.
    seconds : float
        Wall time of the whole sync on this rank (the wait for the last rank included).
    """

    rank: int | None
    world: int | None
    before: tuple[int, ...]
    after: tuple[int, ...]
    partial: tuple[str, ...]
    not_taken: tuple[str, ...]
    max_bytes: int | None
    schemas: int
    payload_bytes: int
    collectives: int
    seconds: float


def width(text: str) -> int:
    """How many ints the entry ``text`` carries (from the entry alone)."""
    entry = json.loads(text)
    kind = entry[0]
    if kind == "step":
        return int(sum(entry[3])) + 3
    return {"config": 0, "budget": 1, "slot": 3}.get(kind, 1)


def collect(table: SlotTable) -> dict[str, list[int]]:
    """This rank's entries and their ints (see the module's text)."""
    governor = table.governor
    with governor.mutex:
        governor.check_open()
        found = {
            encode_entry(["config", table.ubatches, table.lanes, governor.alignment]): [],
            encode_entry(["budget"]): [-(governor.max_bytes or _NO_CAP)],
        }
        for slot in table.slots:
            i = slot.index
            workspaces = slot.store(WorkspaceStore)
            triton = max([workspaces.triton_hint, *_triton_sizes(slot)])
            found[encode_entry(["slot", i])] = [slot.buffer.capacity, slot.plain_high, triton]
            for key, book in list(books_of(slot).items()):
                if book.running or not (book.planned or book.runs):
                    continue  # a run open now: its record is not finished
                entry = ["step", i, repr(key), *step_structure(book)]
                found[encode_entry(entry)] = step_figures(book)
            for key, block in list(workspaces.library.items()):
                found[encode_entry(["workspace", i, repr(key)])] = [block.nbytes]
            for key, buffer in list(slot.store(PersistentStore).buffers.items()):
                (view,) = buffer.layout.views
                entry = ["persistent", i, repr(key), list(view.shape), view.dtype.name]
                found[encode_entry([*entry, buffer.zero_init])] = [buffer.allocation.nbytes]
    return found


def _triton_sizes(slot: Slot) -> Iterator[int]:
    return (block.nbytes for block in list(slot.store(WorkspaceStore).triton.values()))


def describe(text: str, lanes: int) -> str:
    """``"step 'decode' of slot (ubatch 0, lane 0)"``, for the report."""
    entry = json.loads(text)
    if len(entry) < 2:
        return str(entry[0])
    ubatch, lane = divmod(entry[1], lanes)
    where = f"slot (ubatch {ubatch}, lane {lane})"
    return f"{entry[0]} {entry[2]} of {where}" if len(entry) > 2 else where


def _rebuild(text: str, own: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, key)`` for the key whose repr is ``text``: this rank's own, else one
    ``literal_eval`` gives back as itself; ``(False, None)`` when neither works."""
    if text in own:
        return True, own[text]
    try:
        with _PARSING:
            key = ast.literal_eval(text)
        hash(key)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    return (repr(key) == text), key


def apply_maxima(table: SlotTable, local: dict[str, list[int]], got: Exchange) -> list[str]:
    """Take the ranks' maxima: the smallest cap, every slot at the largest capacity and
    request, every step planned from the largest sizes, every workspace and persistent
    buffer any rank has. Returns the keys not taken, described.

    Raises
    ------
    ArenaSyncError
        The ranks' arenas differ in ubatches, lanes or alignment.
    ArenaLockedError
        This arena is locked and the maxima need more than it holds.
    """
    configs = [e for e in got.entries if e.startswith('["config"')]
    if len(configs) > 1:
        raise ArenaSyncError(
            "the ranks' arenas differ in configuration ([ubatches, lanes, alignment]: "
            f"{', '.join(json.loads(c)[1:].__repr__() for c in configs)}); make every rank's "
            "arena alike before sync()"
        )
    governor = table.governor
    lanes = table.lanes
    not_taken: list[str] = []
    resizes: list[Resize] = []
    try:
        with governor.mutex:
            governor.check_open()
            cap = -got.values[encode_entry(["budget"])][0]
            governor.max_bytes = None if cap >= _NO_CAP else cap
            if governor.locked:
                _check_nothing_grows(table, local, got)
                return not_taken
            steps: dict[tuple[int, str], list[tuple[list[Any], list[int]]]] = {}
            for text in got.entries:
                entry, values = json.loads(text), got.values[text]
                kind = entry[0]
                if kind == "slot":
                    slot = table.slots[entry[1]]
                    capacity, plain, triton = values
                    slot.note_plain(plain)
                    resize = slot.reserve(capacity)
                    if resize is not None:
                        resizes.append(resize)
                    if triton:
                        slot.store(WorkspaceStore).presize(TRITON, None, triton)
                elif kind == "step":
                    steps.setdefault((entry[1], entry[2]), []).append((entry[3:], values))
                elif kind in ("workspace", "persistent") and not _take_key(
                    table.slots[entry[1]], entry, values, governor.alignment
                ):
                    not_taken.append(describe(text, lanes))
            for (index, text), candidates in steps.items():
                slot = table.slots[index]
                resize = _take_step(slot, text, candidates, governor.alignment)
                if isinstance(resize, str):
                    not_taken.append(f"step {text} of slot {slot.describe()} ({resize})")
                elif resize is not None:
                    resizes.append(resize)
    finally:
        table.announce("resize", resizes)
    return not_taken


def _check_nothing_grows(table: SlotTable, local: dict[str, list[int]], got: Exchange) -> None:
    """On a locked arena: refuse maxima that would grow a slot, grow or add a key, or
    change a step's plan; anything else (a larger request that fits, the cap) is fine."""
    for text in got.entries:
        entry, values = json.loads(text), got.values[text]
        kind, own = entry[0], local.get(text)
        if kind in ("budget", "config"):
            continue
        if kind == "slot":
            assert own is not None  # every rank has every slot of its configuration
            grows = values[0] > own[0]
        else:
            grows = own is None or bool([g for g, o in zip(values, own, strict=True) if g > o])
        if not grows:
            continue
        slot = table.slots[entry[1]]
        need = values[0] if kind == "slot" else 0
        error = slot.locked_error(need)
        raise ArenaLockedError(
            f"sync() on a locked arena: another rank has more for {describe(text, table.lanes)} "
            f"than this rank holds ({error}). Call sync() (or lock(group=...)) before lock(), "
            "or unlock() first",
            caller=error.caller,
            required=need,
            current=slot.buffer.capacity,
            slot=(slot.ubatch, slot.lane),
        )


def _take_key(slot: Slot, entry: list[Any], values: list[int], alignment: int) -> bool:
    """A library workspace or persistent buffer of the maxima; whether it was taken."""
    kind, text = entry[0], entry[2]
    workspaces, persistent = slot.store(WorkspaceStore), slot.store(PersistentStore)
    store = workspaces.library if kind == "workspace" else persistent.buffers
    ok, key = _rebuild(text, {repr(k): k for k in list(store)})
    if not ok:
        return False
    if kind == "workspace":
        workspaces.presize(LIBRARY, key, values[0])
        return True
    shape, dtype, zero_init = entry[3:]
    layout = compute_layout([(tuple(shape), dtype)], alignment)
    existing = persistent.buffers.get(key)
    if existing is None:
        persistent.create(key, layout, bool(zero_init))
        return True
    return existing.layout.views[0].shape == layout.views[0].shape and (
        existing.layout.views[0].dtype.name == dtype
    )


def _take_step(
    slot: Slot, text: str, candidates: list[tuple[list[Any], list[int]]], alignment: int
) -> Resize | str | None:
    """Install the plan of the largest candidate structure (the first in sorted order
    among equals: every rank picks the same); the resize that makes room for it, or why
    the key was not taken."""
    store = step_books(slot)
    ok, key = _rebuild(text, {repr(k): k for k in list(store.by_key)})
    if not ok:
        return "its key cannot be rebuilt here"
    own = store.by_key.get(key)
    if own is not None and own.running:
        return "a run of it is open here"
    books = [agreed_book(structure, figures, alignment, own) for structure, figures in candidates]
    book = max(books, key=lambda b: max(b.reach, b.total))  # max() keeps the first of equals
    if own is None:
        store.keep(key, book)
    else:
        own.take_plan(book)
    return slot.reserve(max(book.reach, book.total))
