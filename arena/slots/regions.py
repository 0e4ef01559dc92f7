"""Healing a slot's region stack: closing the scopes and steps an interrupt left open.

A slot's regions (its stack's, :attr:`arena.slots.stack.RegionStack.regions`) are the
open scopes and steps of :mod:`arena.planning.scopes` and :mod:`arena.planning.steps`,
innermost last. This module knows of a region only what the stack needs: it is an object
with ``__exit__`` (and maybe a ``nested`` region below it), so the request path
(:mod:`arena.views.builder`) heals a stack without importing the planning layer above it.
"""

from __future__ import annotations

import sys
from typing import Any

from arena.slots.slot import Slot

__all__ = ["heal_regions"]


class _Probe:
    """A stand-in region for :func:`_calibrate`: counted as a region is."""

    __slots__ = ()


def heal_regions(slot: Slot) -> None:
    """Close the regions of ``slot`` that nothing can close any more: their owner is gone.

    An interrupt that lands after a scope's or step's ``__enter__`` opened its region and
    before the ``with`` statement took it (at ``__enter__``'s return), or in ``__exit__``
    before the region closed, leaves a region open whose scope or step nothing but the
    slot (and the regions above it) refers to. Later requests would live above it and
    the step's key would stay running. Each is exited as interrupted, innermost first.
    A region its caller still holds is left alone (CPython's reference counts tell;
    elsewhere nothing is healed)."""
    if _ORPHANED is None:
        return
    for region in reversed(tuple(slot.stack.regions)):
        if _references(region, slot.stack.regions) <= _ORPHANED:
            region.__exit__(KeyboardInterrupt, None, None)


def _references(region: Any, regions: list[Any]) -> int:
    """References to ``region`` beyond those of ``regions``: the stack itself and the
    steps opened above it (``nested``). Includes this check's own (see _ORPHANED).

    Only a step has a ``nested``, and it is always a step
    (:meth:`~arena.slots.stack.RegionStack.step_below`), so a scope is referred to by its
    entries alone; the compiled check (``regions_held`` in
    ``arena/planning/_region_hit.c``) counts the same (tests/planning/test_heal_check_paths.py)."""
    known = sum(1 for r in regions if r is region or getattr(r, "nested", None) is region)
    return sys.getrefcount(region) - known


def _calibrate() -> int | None:
    """What :func:`_references` finds for a region only a stack refers to, called as
    heal_regions calls it (None where reference counts do not tell: not CPython)."""
    if sys.implementation.name != "cpython":
        return None
    regions = [_Probe()]
    for region in reversed(tuple(regions)):
        return _references(region, regions)
    return None


#: The count of a region nothing but its slot refers to (None: healing is off).
_ORPHANED = _calibrate()
