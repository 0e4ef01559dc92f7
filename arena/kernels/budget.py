"""Budgets: what a request needs and what an arena will hold after ``lock()``.

* :func:`layout_bytes`: the bytes one request needs, with no arena and no allocation;
* :func:`planned_bytes`: what an arena will hold once :meth:`~arena.Arena.lock` has sized
  every slot like its lane's largest (``lock()`` releases nothing), so an engine can
  subtract it before sizing its KV cache;
* the cap (``Arena(max_bytes=N)``, ``ARENA_MAX_BYTES``) is enforced by
  :meth:`~arena.slots.governor.Governor.check_budget` before every allocation.

:mod:`arena.kernels.memstats` defines each key of :meth:`~arena.Arena.memory_stats`.
"""

from __future__ import annotations

from typing import Any

from arena.base.layout import DEFAULT_ALIGNMENT, check_alignment, compute_layout
from arena.slots.governor import address_bytes
from arena.slots.table import SlotTable

__all__ = ["address_bytes", "layout_bytes", "planned_bytes"]


def layout_bytes(*specs: tuple[Any, Any], alignment: int = DEFAULT_ALIGNMENT) -> int:
    """The bytes one request of ``(shape, dtype)`` specs needs in a slot buffer.

    Computed as a request is (each view rounded up to ``alignment``), with no arena and
    no allocation: ``Arena.reserve(*specs)`` would size a slot to exactly this.

    Parameters
    ----------
    *specs : tuple of (shape, dtype)
        The request, as :meth:`arena.Arena.get_simultaneous` takes it.
    alignment : int, optional
        The arena's alignment: a power of two from 16 to 2**30 (default 256).

    Returns
    -------
    int
        Bytes.

    Raises
    ------
    ConfigError
        For a bad alignment.
    SpecError, DTypeError
        For a malformed request.
    """
    return compute_layout(specs, check_alignment(alignment)).total


def planned_bytes(table: SlotTable) -> int:
    """What the arena will hold after ``lock()``: every block it holds now plus what
    ``lock()`` adds (nothing once locked; see
    :meth:`~arena.slots.table.SlotTable.lock_additions`). See
    :meth:`arena.Arena.planned_bytes`."""
    governor = table.governor
    with governor.mutex:
        held = governor.ledger.live_bytes
        if governor.locked or governor.closed:
            return held
        return held + table.lock_additions()
