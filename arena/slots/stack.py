"""A slot's region stack: the scopes and steps open on it, and what they hold.

A scope (:mod:`arena.planning.scopes`) or a step (:mod:`arena.planning.steps`) opened on
a slot is a *region*: its requests live at and above the slot's *top*, the byte where
the next request above the open regions starts, and a plain request made while regions
are open lives above them. Each slot has one :class:`RegionStack` (``slot.stack``) that
keeps the open regions, innermost last, the top and the bytes they hold for live views.
The figures a request leaves behind (LOAD, the largest request outside every step) are
the slot's own counters, beside its calls and high-water mark
(:meth:`~arena.slots.slot.Slot.note_load`, which asks the stack for the step below).

This module knows of a region only what the stack needs: an object with ``held`` (the
bytes it holds for live views) that may have ``note_above`` (a step: the bytes a request
inside its run reached above its end). The scopes and steps, above this layer, open and
close their regions through the slot (:meth:`~arena.slots.slot.Slot.open_region`,
:meth:`~arena.slots.slot.Slot.close_region`: the slot keeps its ``detour`` flag in step
with the stack) and, once they stored what they hold, have the stack count its live
bytes from them (:meth:`RegionStack.settle`: what the regions under the innermost hold,
counted once after the regions change, plus what the innermost holds); the request path
(:mod:`arena.views.builder`) asks it for the top. Only this class's methods write its
fields (tests/test_layers.py holds it). The compiled hits (``arena/views/_hit.c``,
``arena/planning/_region_hit.c``) read
them by member offset and change them through this layer's compiled stores (its C-API,
``arena/slots/_slot_api.h`` and ``_slot.c``: ``arena_slot_account`` and the slot's
``open_region`` and ``close_region``, which mark ``below`` to be counted again), the same
plain stores.

Each change a method makes is installed by plain stores with no call between them, so an
interrupt sees the stack as it was or as it is after the change: a new list of regions,
never one changed in place.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RegionStack"]


class RegionStack:
    """The regions open on one slot, innermost last, their top and live bytes.

    Attributes
    ----------
    regions : list
        The open scopes and steps, innermost last (a new list on every change).
    top : int
        Where the next request above the open regions starts (0 when none is open).
    live : int
        Bytes the open regions hold for live views (the top, minus any holes).
    below : int
        Bytes the regions under the innermost hold, as :meth:`settle` last counted them;
        -1 when the regions changed since (the next settle counts them).
    """

    __slots__ = ("below", "live", "regions", "top")

    def __init__(self) -> None:
        self.regions: list[Any] = []
        self.top = 0
        self.live = 0
        self.below = 0

    def push(self, region: Any) -> None:
        """Open ``region`` innermost (the slot's :meth:`~arena.slots.slot.Slot.open_region`
        calls this with the mutex held): a new list, installed in one store with
        ``below`` marked to be counted again."""
        self.regions, self.below = [*self.regions, region], -1

    def remove(self, region: Any, top: int, live: int) -> bool:
        """Close ``region`` (the innermost, or any) and set what stays: the new top and
        live bytes (0 when nothing stays open). False when it is not open (closed
        already: nothing changes). The mutex is held by the caller (the slot's
        :meth:`~arena.slots.slot.Slot.close_region`); the new list, top and live are
        installed in one store, with ``below`` marked to be counted again."""
        regions = self.regions
        if region not in regions:
            return False
        kept = [r for r in regions if r is not region]
        top, live = (top, live) if kept else (0, 0)
        self.regions, self.top, self.live, self.below = kept, top, live, -1
        return True

    def recount(self) -> None:
        """A region under the innermost is about to change what it holds (a step's
        release while a region opened inside it is open): ``below`` is counted again by
        the next :meth:`settle`. Called before the region's stores, so an interrupt
        between them and the region's settle leaves no stale ``below`` that the
        innermost's settles would carry on. One plain store."""
        self.below = -1

    def settle(self, top: int, region: Any) -> None:
        """``region`` placed or released bytes, its own ``end`` and ``held`` stored first:
        the next request above the open regions starts at ``top``, and the live bytes
        are what the open regions hold. Only the slot's own thread calls this.

        O(1) for the innermost region's requests: the live bytes are ``below`` (what the
        regions under the innermost hold, counted once after the regions change) plus the
        innermost's ``held``; a region under the innermost that settles (a step's
        release while a region opened inside it is open) has them counted again. So the
        figure is counted from the regions' own, never added to: an interrupt between a
        region's stores and this call leaves the stack's old figures only until the
        region's next settle, a change of the regions, or its close (which count from
        the regions' own again). The three figures are installed by plain stores in one
        assignment after the count, with no call among them."""
        regions = self.regions
        below = self.below
        if below < 0 or not regions or regions[-1] is not region:
            below = 0
            for under in regions[:-1]:  # a loop with no call (a signal lands before the stores)
                below += under.held
        live = below + regions[-1].held if regions else 0
        self.top, self.live, self.below = top, live, below

    def step_below(self, region: Any) -> Any:
        """The innermost step (a region with ``note_above``) open below ``region`` (None:
        above every region), or None."""
        regions = self.regions
        if region is not None:
            regions = regions[: regions.index(region)] if region in regions else []
        # A loop, not next() over a generator: one left suspended is closed when it is
        # collected, and an interrupt raised there would be printed and lost.
        for below in reversed(regions):
            if hasattr(below, "note_above"):
                return below
        return None
