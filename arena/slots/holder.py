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

    Records which thread is inside a request on one slot, and how deeply (re-entrant).
    """

    __slots__ = ("__weakref__", "depth", "guard", "thread")

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.depth = 0
        self.guard = threading.Lock()
        after_fork(self, SlotHolder._forget)

    def _forget(self) -> None:
        """After a fork: the threads of the parent do not exist in the child."""
        self.thread = None
        self.depth = 0
        self.guard = threading.Lock()

    def enter(self, slot: _Described) -> None:
        """Mark the calling thread as inside a request on ``slot``.

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

    def leave(self) -> None:
        """The calling thread's request is done."""
        with self.guard:
            self.depth -= 1
            if self.depth <= 0:
                self.depth = 0
                self.thread = None
