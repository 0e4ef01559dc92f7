"""Poisoning: every request's views are filled with a sentinel before they are returned.

With ``Arena(poison=True)`` (or ``ARENA_POISON=1``) reading scratch memory before writing
it, or reading a view after the next request on the same slot, shows at once:

* floating dtypes (float16/32/64, bfloat16, complex, the float8 types with a NaN) read
  NaN: every byte is ``0xFF`` (a NaN in every IEEE-like format), or ``0x80`` for the
  ``fnuz`` float8 types, whose only NaN is that byte;
* every other dtype (integers, bool, ``float4_e2m1fn_x2``, which has no NaN) reads the
  byte pattern ``0xA5`` repeated (``int32`` ``-1515870811``, ``uint8`` ``165``);
* the bytes the previous request on the slot covered and this one does not (a larger
  earlier request, the gaps between views) are ``0xFF`` too, so a view kept from the
  previous request reads NaN there. Where the new request hands those bytes out as an
  integer view, the kept float view reads that view's ``0xA5`` pattern (a tiny float) until
  it is written.

Views stay in the block they were made over, also when the slot grows while they live: a
growth keeps the buffer it replaces (only while poisoning, until its views are stale and
poisoned: the next plain request with no scope or step open, or the exit of the outermost
scope or step), so an exited scope's, a released step view's or the previous request's
bytes are poisoned there too. Poisoning therefore holds a replaced block's memory a little
longer.

The fill is one call per view, written by each adapter (``Adapter.fill``): a byte view's
``fill`` for NumPy and CuPy (on CuPy's current stream), torch's ``fill_`` on a GPU (on
torch's current stream), a ``memset`` for host torch tensors and for JAX arrays. It costs a
memory write of every byte requested: a debugging aid, off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arena.base.dtypes import resolve_dtype
from arena.environment import flag_from_env

__all__ = [
    "NAN_BYTE",
    "NAN_BYTE_FNUZ",
    "PATTERN_BYTE",
    "poison_bytes",
    "poison_from_env",
    "poison_outgrown",
    "poison_slot_bytes",
    "poison_stale_bytes",
    "poisoned",
    "sentinel",
    "sentinel_byte",
]

#: Byte written to the views of floating dtypes: all bits set is a NaN in IEEE formats.
NAN_BYTE = 0xFF
#: The ``fnuz`` float8 formats have one NaN: the byte ``0x80``.
NAN_BYTE_FNUZ = 0x80
#: Byte written to the views of every other dtype.
PATTERN_BYTE = 0xA5

_NO_NAN = {"float4_e2m1fn_x2"}
_BYTE_OF: dict[Any, int] = {}


def poison_from_env(variable: str = "ARENA_POISON") -> bool:
    """Whether the poison environment variable is set to a true value (see
    :func:`arena.environment.flag_from_env`: anything but a yes/no value raises
    ``ConfigError``)."""
    return flag_from_env(variable)


def sentinel(dtype: Any) -> int:
    """The byte a view of ``dtype`` is filled with (any dtype :func:`resolve_dtype` takes)."""
    name = resolve_dtype(dtype).name
    if name.startswith(("float", "bfloat", "complex")) and name not in _NO_NAN:
        return NAN_BYTE_FNUZ if name.endswith("fnuz") else NAN_BYTE
    return PATTERN_BYTE


def sentinel_byte(dtype: Any) -> int:
    """:func:`sentinel`, memoised per dtype object: what an adapter's ``fill`` writes."""
    try:
        return _BYTE_OF[dtype]
    except KeyError:
        value = _BYTE_OF[dtype] = sentinel(dtype)
        return value
    except TypeError:  # unhashable dtype object
        return sentinel(dtype)


def poison_stale_bytes(buffer: Any, adapter: Any, views: Sequence[Any], start: int = 0) -> None:
    """Poison what the previous request on this buffer left beyond the new views' bytes.

    Every byte from ``start`` (where plain requests begin: the slot's top, above what open
    scopes and steps hold) to the end of the previous request or of this one, whichever
    is further, is set to :data:`NAN_BYTE` (a NaN for every IEEE float), then the new views
    get their own sentinels again. So a view kept from the previous request reads NaN
    wherever the new request does not hand out those bytes as an integer view.
    """
    allocation = buffer.allocation
    if allocation is None:
        return
    address = adapter.data_ptr
    end = max((address(v) - allocation.ptr + v.nbytes for v in views if v.nbytes), default=0)
    reach = max(end, buffer.poisoned_end)
    buffer.poisoned_end = end
    if reach > start:
        owner = allocation.owner
        if hasattr(owner, "fill_"):  # a torch tensor owner (a torch-only CUDA arena)
            owner[start:reach].fill_(NAN_BYTE)
        elif hasattr(owner, "fill"):  # NumPy and CuPy
            owner[start:reach].fill(NAN_BYTE)
    if reach:
        adapter.fill(views)


def poison_bytes(buffer: Any, start: int, end: int) -> None:
    """Set bytes ``start`` to ``end`` of ``buffer`` (a slot buffer) to :data:`NAN_BYTE`: the
    bytes of an exited scope or a released step view, so a view kept past its life reads
    NaN (or a garbage integer)."""
    allocation = buffer.allocation
    end = min(end, buffer.capacity)
    if allocation is None or end <= start:
        return
    owner = allocation.owner
    if hasattr(owner, "fill_"):  # a torch tensor owner (a torch-only CUDA arena)
        owner[start:end].fill_(NAN_BYTE)
    elif hasattr(owner, "fill"):  # NumPy and CuPy
        owner[start:end].fill(NAN_BYTE)


def poison_slot_bytes(slot: Any, start: int, end: int) -> None:
    """:func:`poison_bytes` in the slot's buffer and in every buffer a growth replaced
    while the views of those bytes lived (the views stay in the block they were made
    over): an exited scope's or a released step view's bytes, wherever they live.

    Nothing is written while the arena is asleep: its memory is released (a step run then
    reserves its plan's bytes without a request), and wake(poison=True) poisons the
    discarded scratch."""
    if not slot.governor.asleep:
        poison_bytes(slot.buffer, start, end)
        for buffer in slot.outgrown:
            poison_bytes(buffer, start, end)
    if slot.outgrown and not slot.stack.regions:  # the outermost region exited: all are stale
        slot.forget_outgrown()


def poison_outgrown(slot: Any) -> None:
    """After a plain request: the bytes from the slot's top up of every buffer a growth
    replaced (the previous request's views, stale now) are set to :data:`NAN_BYTE`. With
    no scope or step open, no view of those buffers is live any more: the slot lets
    them go."""
    if not slot.outgrown:
        return
    start = slot.stack.top
    for buffer in slot.outgrown:
        poison_bytes(buffer, start, buffer.capacity)
    if not slot.stack.regions:
        slot.forget_outgrown()


def poisoned(
    adapter: Any, fresh: Callable[[Sequence[Any]], list[Any] | None]
) -> Callable[[Sequence[Any]], list[Any] | None]:
    """``fresh`` (a front's view maker), followed by the adapter's ``fill`` of its result.

    A poisoning front uses this in place of its view maker, so an arena without poison
    pays nothing on its hot path, not even a test.
    """

    def fresh_and_filled(prepared: Sequence[Any]) -> list[Any] | None:
        views = fresh(prepared)
        if views is not None:  # None: the prepared views are gone, the front rebuilds
            adapter.fill(views)
        return views

    return fresh_and_filled
