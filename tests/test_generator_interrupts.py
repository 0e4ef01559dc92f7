"""An interrupt at any entry or return in code that asked any(), all() or next() of a
generator comes out (issue 26 item 2, review 40).

Those stop at their first answer and leave the generator suspended; it is closed when
collected, and an interrupt that lands in that close (the generator's own frame is
arena code, and a signal can land there too) is printed as "Exception ignored" and lost:
the caller carries on as if nothing had happened. arena asks lists and loops instead.
"""

from __future__ import annotations

import ast
import math
import stat
from pathlib import Path
from typing import Any

import pytest

import arena
from arena import Arena, ArenaLockedError
from arena.base.layout import _split_spec
from arena.memory.ledger import Ledger
from arena.memory.sources import HostSource
from arena.observe.files import file_kind
from arena.observe.profilesteps import _lists
from arena.planning.offsets import plan_offsets
from arena.slots.persistent import _unequal
from tests.interrupts import lost_interrupts

F32 = "float32"
ASKED_EARLY = frozenset({"any", "all", "next"})


def test_arena_asks_no_any_all_or_next_of_a_generator() -> None:
    """Every such call in arena's source (the dynamic tests below cover a few)."""
    root = Path(arena.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ASKED_EARLY
                and [a for a in node.args if isinstance(a, ast.GeneratorExp)]
            ):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not found, found


def test_split_spec() -> None:
    """all() stopped at a spec's shape (not an int): every spec the slow path checks."""
    assert not lost_interrupts(lambda _: _split_spec(0, ((4, 128), F32)))


def test_unequal_key() -> None:
    """any() stopped at the NaN of a tuple key."""
    assert not lost_interrupts(lambda _: _unequal((1, math.nan, 3)))


def test_file_kind() -> None:
    """next() stopped at the first kind that matched."""
    assert not lost_interrupts(lambda _: file_kind(stat.S_IFIFO))


def test_profile_step_lists() -> None:
    """next() stopped at a step list's first bad item."""
    entry = {"counts": [1, -1, 2], "sizes": [], "lasts": [], "offsets": []}
    assert not lost_interrupts(lambda _: _lists(entry, 2**63 - 1))


def test_ledger_owns() -> None:
    """any() stopped at the block holding the pointer."""

    ledgers: list[Ledger] = []

    def setup() -> tuple[Ledger, int]:
        ledger = Ledger(HostSource())
        ledgers.append(ledger)
        first = ledger.allocate(256, "first")
        ledger.allocate(256, "second")
        return ledger, first.ptr

    def run(state: tuple[Ledger, int]) -> None:
        ledger, ptr = state
        assert ledger.owns(ptr)

    try:
        assert not lost_interrupts(run, setup)
    finally:
        for ledger in ledgers:
            ledger.release_live()


def test_divergence_of_a_locked_replay() -> None:
    """any() stopped at the view that outgrew its planned block (the refusal's reason)."""

    def setup() -> Arena:
        ws = Arena("cpu", framework="numpy")
        for _ in range(2):
            with ws.step("s") as st:
                st.get_simultaneous(((1024,), F32))
                st.get_simultaneous(((16,), F32), ((16,), F32))
        ws.lock()
        return ws

    def run(ws: Arena) -> Any:
        try:
            with ws.step("s") as st:
                st.get_simultaneous(((1024,), F32))
                st.get_simultaneous(((16,), F32), ((128,), F32))  # 512 > 256
        except ArenaLockedError as error:
            assert "its views need [256, 512] bytes" in str(error)
        finally:
            ws.close()

    assert not lost_interrupts(run, setup)


def test_plan_offsets_local_search() -> None:
    """The local search stopped at the first move that helped and dropped the rest of
    its generator of moves (planning at every lock() and step plan)."""
    blocks = [
        (11776, 4, 10), (1024, 10, 16), (8192, 7, 12), (5376, 0, 0), (15616, 5, 11),
        (12544, 3, 7), (8192, 1, 1), (13568, 3, 5), (12800, 2, 3), (4608, 1, 5),
        (14592, 9, 10), (256, 2, 8), (6912, 0, 6), (5632, 3, 9),
    ]  # fmt: skip
    assert plan_offsets(blocks).moves == 1  # found by a random search: one move helps
    assert not lost_interrupts(lambda _: plan_offsets(blocks))


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
