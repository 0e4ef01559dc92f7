"""Which slot a request uses: the micro-batch (per thread, or a resolver) and the lane
(per context, or a resolver)."""

from __future__ import annotations

import contextvars
import itertools
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Protocol

from arena.base.layout import exact_int, int_not_bool
from arena.errors import ConfigError, SlotError
from arena.slots.slot import Slot

__all__ = ["SlotSelector", "UbatchBinding", "check_index"]


class UbatchBinding(Protocol):
    """A thread's micro-batch binding (a ``threading.local``): its ``ubatch``."""

    ubatch: int


#: Numbers of join hooks, unique in the process (see :meth:`SlotSelector.on_join`).
_join_numbers = itertools.count(1)


class SlotSelector:
    """Resolves the calling thread and context to one of an arena's slots.

    Parameters
    ----------
    slots : sequence of Slot
        Ubatch-major: slot ``ubatch * lanes + lane``.
    lanes : int
        Lanes per micro-batch (the number of micro-batches follows from ``slots``).
    ubatch_resolver, lane_resolver : callable or None
        Called on every request instead of the per-thread binding / the lane context.
    name : str
        Names the lane context variable.
    binding : callable
        Makes the per-thread micro-batch binding: a ``threading.local`` with an
        ``ubatch`` attribute. The facade passes the compiled hit path's own binding type
        where it is in use (:data:`arena.views.hit.Binding`, a layer above this one), so
        that the hit path reads it without a lookup.
    """

    __slots__ = (
        "_joined",
        "_lane",
        "_lane_resolver",
        "_lanes",
        "_on_join",
        "_only",
        "_resolver",
        "_slots",
        "_tls",
    )

    def __init__(
        self,
        slots: Sequence[Slot],
        *,
        lanes: int,
        ubatch_resolver: Callable[[], int] | None,
        lane_resolver: Callable[[], int] | None,
        name: str,
        binding: Callable[[], UbatchBinding],
    ) -> None:
        self._slots = tuple(slots)
        self._lanes = lanes
        self._resolver = ubatch_resolver
        self._lane_resolver = lane_resolver
        # Each thread's micro-batch (0 until it binds one); the compiled hit path's own
        # binding type where it is in use, so that it reads it without a lookup.
        self._tls = binding()
        self._lane: contextvars.ContextVar[int] = contextvars.ContextVar(name, default=0)
        # A single-slot arena answers from C. Not a bound method of self stored on self:
        # that would be a reference cycle, holding every buffer until the cycle collector.
        self._only: Callable[[], Slot] | None = None
        if len(self._slots) == 1 and ubatch_resolver is None and lane_resolver is None:
            self._only = itertools.repeat(self._slots[0]).__next__
        # (number, hook): hook() runs once per thread the first time the thread binds a
        # micro-batch, or selects a slot in Python (a resolver, several lanes): Triton's
        # allocator is installed there. A thread keeps the number it ran, never the hook.
        self._on_join: tuple[int, Callable[[], None]] | None = None
        self._joined = threading.local()

    def on_join(self, hook: Callable[[], None] | None) -> None:
        """Call ``hook()`` in each thread the first time it binds a micro-batch or selects
        a slot in Python, from now on (None: stop)."""
        self._on_join = None if hook is None else (next(_join_numbers), hook)

    def _join(self) -> None:
        """Run the join hook in the calling thread unless it already ran there."""
        join = self._on_join
        if join is not None and getattr(self._joined, "number", 0) != join[0]:
            join[1]()
            self._joined.number = join[0]

    @property
    def ubatches(self) -> int:
        """Number of micro-batch slots."""
        return len(self._slots) // self._lanes

    @property
    def select(self) -> Callable[[], Slot]:
        """``select()`` -> the calling thread's slot (fetch it once: a callable to keep)."""
        if self._only is not None:
            return self._only
        if self._lanes == 1 and self._resolver is None and self._lane_resolver is None:
            # One lane, no resolver: the thread's micro-batch is the whole answer (its
            # binding is checked when it is set). A closure, not a method: no cycle.
            slots, tls = self._slots, self._tls

            def select() -> Slot:
                return slots[tls.ubatch]

            return select
        return self._select

    @property
    def shortcut(self) -> tuple[tuple[Slot, ...] | None, Any]:
        """``(slots, tls)`` where the compiled hit path finds the slot without a call:
        ``slots[tls.ubatch]`` with one lane and no resolver, ``slots[0]`` (``tls`` None)
        for a single slot; ``(None, None)`` where only :attr:`select` knows."""
        if self._resolver is not None or self._lane_resolver is not None:
            return None, None
        if len(self._slots) == 1:
            return self._slots, None
        if self._lanes == 1:
            return self._slots, self._tls
        return None, None

    def _select(self) -> Slot:
        ubatches = len(self._slots) // self._lanes
        if self._on_join is not None:
            self._join()
        if self._resolver is None:
            ubatch = self._tls.ubatch
        else:
            ubatch = self._resolver()
            if not exact_int(ubatch) or not 0 <= ubatch < ubatches:
                ubatch = _resolved("ubatch", ubatch, ubatches)
        if self._lane_resolver is None:
            lane = self._lane.get()
        else:
            lane = self._lane_resolver()
            if not exact_int(lane) or not 0 <= lane < self._lanes:
                lane = _resolved("lane", lane, self._lanes)
        return self._slots[ubatch * self._lanes + lane]

    def select_in_lane(self, lane: int) -> Slot:
        """The slot of the calling thread's micro-batch in ``lane`` (checked by the caller),
        whatever lane the context uses."""
        ubatches = len(self._slots) // self._lanes
        if self._on_join is not None:
            self._join()
        if self._resolver is None:
            ubatch = self._tls.ubatch
        else:
            ubatch = self._resolver()
            if not exact_int(ubatch) or not 0 <= ubatch < ubatches:
                ubatch = _resolved("ubatch", ubatch, ubatches)
        return self._slots[ubatch * self._lanes + lane]

    @property
    def lanes(self) -> int:
        """Lanes per micro-batch."""
        return self._lanes

    def bind_ubatch(self, ubatch: int) -> None:
        """Bind the calling thread to a micro-batch slot.

        Raises
        ------
        ConfigError
            The arena's ``ubatch_resolver`` chooses the micro-batch.
        """
        self._refuse_binding("ubatch", self._resolver, f"bind_ubatch({ubatch!r})")
        self._tls.ubatch = check_index("ubatch", ubatch, self.ubatches)
        self._join()

    @contextmanager
    def ubatch(self, ubatch: int) -> Iterator[None]:
        """Bind the calling thread to ``ubatch`` inside the block, then restore.

        Raises
        ------
        ConfigError
            The arena's ``ubatch_resolver`` chooses the micro-batch.
        """
        self._refuse_binding("ubatch", self._resolver, f"ubatch({ubatch!r})")
        index = check_index("ubatch", ubatch, self.ubatches)
        self._join()
        previous = self._tls.ubatch
        self._tls.ubatch = index
        try:
            yield
        finally:
            self._tls.ubatch = previous

    @contextmanager
    def lane(self, lane: int) -> Iterator[None]:
        """Use ``lane`` inside the block (context-local: threads and tasks stay apart).

        Raises
        ------
        ConfigError
            The arena's ``lane_resolver`` chooses the lane.
        """
        self._refuse_binding("lane", self._lane_resolver, f"lane({lane!r})")
        token = self._lane.set(check_index("lane", lane, self._lanes))
        try:
            yield
        finally:
            self._lane.reset(token)

    @staticmethod
    def _refuse_binding(what: str, resolver: Any, call: str) -> None:
        """A binding the resolver would override at every request: refused, not ignored."""
        if resolver is not None:
            plural = "ubatches" if what == "ubatch" else f"{what}s"
            # vLLM's drop-in resolves both: the micro-batch id, the workspace lane.
            vllm = "the current micro-batch id" if what == "ubatch" else "use_workspace_lane()"
            raise ConfigError(
                f"this arena was built with {what}_resolver={resolver!r}, which chooses the "
                f"{what} of every request, so {call} would have no effect; change what the "
                f"resolver returns (vLLM: {vllm}), or build the arena "
                f"without {what}_resolver to bind {plural} per thread or context"
            )


def _resolved(what: str, value: Any, count: int) -> int:
    """A resolver's answer that is not a plain in-range int: an integer-like (NumPy or
    torch integer) is taken as its int; anything else, or out of range, is a SlotError."""
    plural = "ubatches" if what == "ubatch" else "lanes"
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise SlotError(
            f"{what}_resolver returned the bool {value!r}; return the {what} index as an int"
        )
    try:
        index = operator.index(value)
    except TypeError:
        raise SlotError(
            f"{what}_resolver returned {value!r} ({type(value).__name__}), not an integer; "
            f"return the {what} index as an int in 0..{count - 1}"
        ) from None
    if not 0 <= index < count:
        raise SlotError(
            f"{what}_resolver returned {index}, but this arena has {count} {what} slot(s) "
            f"(0..{count - 1}); construct the arena with {plural}={max(index + 1, count)} or "
            "more"
            if index >= 0
            else f"{what}_resolver returned {index}; {what} indices start at 0"
        )
    return index


def _index_fix(value: Any, count: int) -> str:
    """The fix an index refused for its type names: its value as a plain int where it has
    one (a NumPy integer, a float such as 1.0), else the range."""
    if not isinstance(value, bool):
        with suppress(TypeError, ValueError, OverflowError):
            exact = operator.index(value) if hasattr(value, "__index__") else None
            if exact is None and isinstance(value, float) and value.is_integer():
                exact = int(value)
            if exact is not None:
                return f"pass the plain int {exact}, int({value!r})"
    return f"pass a plain int from 0 to {count - 1}"


def check_index(what: str, value: Any, count: int) -> int:
    """Validate a ubatch or lane index; returns it as a plain int.

    An int subclass (an ``IntEnum`` member) is taken as its value, a plain int, which is
    what the selector and the compiled hit path read, and what the range check compares:
    a subclass's own arithmetic and comparisons are never used.

    Raises
    ------
    SlotError
        With the value, the valid range and the fix.
    """
    if not int_not_bool(value):
        raise SlotError(
            f"{what} must be an int, got {type(value).__name__} {value!r}; "
            f"{_index_fix(value, count)}"
        )
    # operator.index of an int subclass is a plain int of its value (no __index__ call).
    index = operator.index(value)
    if not 0 <= index < count:
        fix = (
            f"{what} indices start at 0"
            if index < 0
            else f"construct the arena with {what}{'es' if what == 'ubatch' else 's'}="
            f"{index + 1} or more"
        )
        raise SlotError(
            f"{what} {index} is out of range: this arena has {count} {what} slot(s) "
            f"(0..{count - 1}); {fix}"
        )
    return index
