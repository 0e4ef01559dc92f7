"""``ws.sync(group)``: one collective exchange that leaves every rank's arena sized for
the worst any rank saw (:mod:`arena.distributed.wire` runs it, :mod:`arena.distributed.state`
says what is exchanged and takes the maxima back)."""

from __future__ import annotations

import time
from typing import Any

from arena.distributed.groups import as_group
from arena.distributed.state import SyncReport, apply_maxima, collect, describe, width
from arena.distributed.wire import exchange
from arena.slots.table import SlotTable

__all__ = ["sync_table"]


def sync_table(table: SlotTable, group: Any) -> SyncReport:
    """Run :meth:`arena.Arena.sync` on ``table`` over ``group``; see there."""
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
    return value if isinstance(value, int) and not isinstance(value, bool) else None
