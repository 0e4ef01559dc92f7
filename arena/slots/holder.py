"""Debug mode's check that no two threads are inside requests on one slot at once."""

from __future__ import annotations

import threading
from typing import Protocol

from arena.errors import SlotError
from arena.forks import after_fork

__all__ = ["SlotHolder"]


class _Described(Protocol):
    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        ...


class SlotHolder:
    """Debug mode's check that no two threads are inside requests on one slot at once:
    they would overwrite each other's views (docs/overview.md, "Threads and safety").

    Records which thread is inside a request on one slot, and how deeply (re-entrant),
    and which open scopes and steps hold it (by ``id``: a reference would keep a region
    nothing else refers to from being healed, see :mod:`arena.slots.regions`).
    """

    __slots__ = ("__weakref__", "depth", "guard", "regions", "thread")

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.depth = 0
        self.regions: set[int] = set()
        self.guard = threading.Lock()
        after_fork(self, SlotHolder._forget)

    def _forget(self) -> None:
        """After a fork: the threads of the parent do not exist in the child."""
        self.thread = None
        self.depth = 0
        self.regions = set()
        self.guard = threading.Lock()

    def enter(self, slot: _Described, region: object = None) -> None:
        """Mark the calling thread as inside a request on ``slot`` (or, with ``region``,
        inside that scope or step until :meth:`leave` names it).

        Raises
        ------
        SlotError
            Another thread is inside a request on ``slot`` at the same time.
        """
        me = threading.current_thread()
        with self.guard:
            holder = self.thread
            if holder is not None and holder is not me:
                raise SlotError(
                    f"threads {holder.name!r} (id {holder.ident}) and {me.name!r} (id "
                    f"{me.ident}) use slot {slot.describe()} at the same time; each would "
                    "overwrite the other's views. Bind each thread to its own micro-batch "
                    "(Arena.bind_ubatch(i), or with Arena.ubatch(i)) or lane, and construct "
                    "the arena with enough ubatches/lanes"
                )
            self.thread = me
            self.depth += 1
            if region is not None:
                self.regions.add(id(region))

    def leave(self, region: object = None) -> None:
        """The calling thread's request is done (or, with ``region``, that scope or step:
        once, however often it is called for it). A region's close run again after an
        interrupt cut it short calls this again without knowing whether the first run
        got here; the hold is dropped in the same step as the region's mark, under the
        guard, so it is dropped exactly once."""
        with self.guard:
            if region is not None:
                key = id(region)
                if key not in self.regions:
                    return  # let go already (or never held: refused before it opened)
                self.regions.discard(key)
            self.depth -= 1
            if self.depth <= 0:
                self.depth = 0
                self.thread = None
