"""Reference counts held flat over many calls: the check the leak tests share.

A call that keeps a reference it should drop (or drops one it does not own) moves the
count of the object by one on every call, so a loop of thousands of calls moves it by
thousands. A count can also move by one or two for a reason that has nothing to do with the
code under test: the cyclic collector runs in the middle of the loop and frees garbage that
referred to a shared object (``"float32"``, ``np.ndarray``, ``None``), or a thread an
earlier test left behind takes or drops a reference to it. Both happened in CI (an
interned dtype name read 1774 after the loop and 1775 before it).

``assert_counts_flat`` therefore collects before the loop, keeps the collector off during
it and collects again before it reads the counts; if a count still moved, it runs the whole
measurement again and the second one must be exact. A leak in the code under test moves
the counts both times; a stranger's reference does not strike the same loop twice.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence

__all__ = ["assert_counts_flat", "counts_around"]


def counts_around(
    watched: Sequence[object], run: Callable[[], object]
) -> tuple[list[int], list[int]]:
    """The reference counts of ``watched`` before and after ``run()``, collector off.

    Garbage is collected before the first reading and before the second (so cycles the
    calls made, such as a caught exception's traceback, do not count as kept references).
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        before = [sys.getrefcount(o) for o in watched]
        run()
        gc.collect()
        after = [sys.getrefcount(o) for o in watched]
    finally:
        if was_enabled:
            gc.enable()
    return before, after


def assert_counts_flat(
    watched: Sequence[object], run: Callable[[], object], what: str = ""
) -> None:
    """Assert that ``run()`` leaves every count in ``watched`` where it found it.

    One measurement that moved is repeated once; the repeat must be exact (see the module
    docstring for why one stray move is forgiven and two are not).
    """
    before, after = counts_around(watched, run)
    if after == before:
        return
    again_before, again_after = counts_around(watched, run)
    moved = [
        f"#{i} {type(o).__name__}: {b} -> {a}"
        for i, (o, b, a) in enumerate(zip(watched, again_before, again_after, strict=True))
        if a != b
    ]
    pairs = enumerate(zip(before, after, strict=True))
    first = [f"#{i}: {b} -> {a}" for i, (b, a) in pairs if a != b]
    assert again_after == again_before, (
        f"{what + ': ' if what else ''}reference counts moved in two measurements running; "
        f"first {first}, then {moved}"
    )
