"""``ws.sync(group)``: one collective exchange that leaves every rank's arena sized for
the worst any rank saw (:mod:`arena.distributed.wire` runs it, :mod:`arena.distributed.state`
says what is exchanged and takes the maxima back)."""

from __future__ import annotations

import time
from typing import Any

from arena.base.layout import int_not_bool
from arena.distributed.groups import as_group
from arena.distributed.state import SyncReport, apply_maxima, collect, describe, width
from arena.distributed.wire import exchange
from arena.slots.table import SlotTable

__all__ = ["sync_table"]


def sync_table(table: SlotTable, group: Any) -> SyncReport:
    """:meth:`arena.Arena.sync`: agree with every rank of ``group`` before ``lock()``.

    A collective: every rank calls it at the same point. Each rank leaves with the union
    of the ranks' keys and, per key and per (micro-batch, lane) slot, the largest bytes
    any rank needs: capacities, requests outside steps (reserves and scopes included),
    every step key's recorded or planned sizes, library workspaces, persistent buffers
    and Triton blocks' first size. Step plans are made from those maxima (the same
    offsets on every rank) and ``max_bytes`` becomes the smallest cap of any rank.

    Parameters
    ----------
    table : SlotTable
        The arena's slots.
    group : torch.distributed.ProcessGroup, SyncGroup or None
        A torch process group (None: the default one; gloo or NCCL), or any object with
        ``all_reduce_max(list[int]) -> list[int]`` and ``all_gather(bytes) ->
        list[bytes]`` (:class:`~arena.distributed.groups.JaxProcessGroup`,
        docs/distributed.md).

    Returns
    -------
    SyncReport
        Capacities before and after, keys only some ranks had, keys not taken, the cap,
        bytes handed to the collectives and the time.

    Raises
    ------
    ArenaSyncError
        A rank did not join within the group's timeout (named where the backend tells),
        a collective failed, or the ranks' arenas differ in ubatches, lanes or alignment.
    ArenaLockedError
        This arena is locked and another rank needs more than it holds.
    ConfigError
        ``group`` is none of the kinds above, or None without an initialised default
        process group.
    """
    start = time.perf_counter()
    wrapped = as_group(group)
    before = table.sizes()
    local = collect(table)
    enter = getattr(wrapped, "enter", None)
    if callable(enter):  # TorchGroup on gloo: a monitored barrier names a missing rank
        enter()
    got = exchange(wrapped, local, width)
    not_taken = apply_maxima(table, local, got)
    return SyncReport(
        rank=_int_or_none(getattr(wrapped, "rank", None)),
        world=_int_or_none(getattr(wrapped, "world", None)),
        before=before,
        after=table.sizes(),
        partial=tuple(describe(text, table.lanes) for text in sorted(got.partial)),
        not_taken=tuple(not_taken),
        max_bytes=table.governor.max_bytes,
        schemas=got.schemas,
        payload_bytes=got.payload_bytes,
        collectives=got.collectives + (1 if callable(getattr(wrapped, "enter", None)) else 0),
        seconds=time.perf_counter() - start,
    )


def _int_or_none(value: Any) -> int | None:
    return value if int_not_bool(value) else None
