"""Memory snapshots and event logs in formats that existing tools read.

* :func:`build_snapshot` returns a dict in the format of ``torch.cuda.memory._snapshot()``:
  one segment per slot buffer, retired buffer, persistent buffer, library workspace and
  Triton block (:func:`memory_segments`, whose figures ``memory_stats()`` sums by torch's
  own consistency rules), the views of each slot's last request recorded while unlocked
  (the locked hot path records nothing) in its scratch block, and a device trace of the
  slot-buffer allocations and frees. torch's own viewers read
  it: ``torch.cuda._memory_viz.segsum``, ``segments``, ``memory``, ``trace``,
  ``segment_plot`` and ``trace_plot`` (the HTML page of https://pytorch.org/memory_viz).
* The trace is the recent allocations and frees the ledger (the only object that calls the
  memory source) keeps itself (:attr:`arena.memory.ledger.Ledger.trace`).
  :class:`EventLog`, the ledger's observer where a path is given, appends them to a CSV
  file in RMM's schema, ``Thread,Time,Action,Pointer,Size,Stream``, which
  RMM's replay benchmark and ordinary CSV tools read. Only a regular file is written: a
  FIFO, a device or a directory warns and the arena runs without the log (never blocked).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena.base.events import warn_user
from arena.base.layout import compute_layout
from arena.observe.files import open_append
from arena.slots.persistent import PersistentStore
from arena.slots.workspaces import WorkspaceStore

if TYPE_CHECKING:
    from arena.memory.devices import Device
    from arena.slots.slot import Buffer, Slot
    from arena.slots.table import SlotTable

__all__ = ["CSV_HEADER", "EventLog", "build_snapshot", "memory_segments", "table_snapshot"]

#: The header line of RMM's ``logging_resource_adaptor`` CSV files.
CSV_HEADER = "Thread,Time,Action,Pointer,Size,Stream"
_TRACE_ACTIONS = {"allocate": "segment_alloc", "free": "segment_free", "allocate failure": "oom"}


class EventLog:
    """Writes every allocation and free of one arena's ledger to a CSV file.

    Parameters
    ----------
    path : str or os.PathLike
        Append the events to this CSV file (created with RMM's header line when new or
        empty). It must be a regular file.

    Notes
    -----
    The ledger's observer, made only where an event log is asked for (the trace of
    ``memory_snapshot()`` is the ledger's own). Called by the ledger with the arena's
    mutex held, on the slow paths only. A file that
    cannot be written, or a path that is not a regular file (a FIFO, ``/dev/null``, a
    directory), warns once (:class:`~arena.ArenaWarning`) and is not retried; the arena
    keeps working. The file is opened without blocking, so a FIFO never stalls the arena.
    """

    __slots__ = ("path",)

    def __init__(self, path: Any) -> None:
        self.path: Path | None = Path(path)
        self._append(None)

    def __call__(self, action: str, ptr: int, nbytes: int, what: str) -> None:
        if self.path is None:  # it could not be written: warned once, not retried
            return
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f":{int(now % 1 * 1e6):06d}"
        pointer = f"{ptr:#x}" if ptr else "(nil)"
        self._append(f"{threading.get_ident()},{stamp},{action},{pointer},{nbytes},0\n")

    def _append(self, line: str | None) -> None:
        """Append ``line`` (None: only the header, when the file is new or empty)."""
        assert self.path is not None
        try:  # opened per event: slow paths only, and no handle outlives the arena
            descriptor = open_append(self.path)
            with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
                if os.fstat(descriptor).st_size == 0:
                    handle.write(CSV_HEADER + "\n")
                if line is not None:
                    handle.write(line)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        path, self.path = self.path, None  # warned once, not retried
        warn_user(
            f"cannot write the arena event log {str(path)!r} ({exc}); the arena "
            "keeps working without it. Pass a writable regular file as event_log="
        )


def table_snapshot(table: SlotTable, last_requests: dict[int, tuple[str, Any]]) -> dict[str, Any]:
    """See :meth:`arena.Arena.memory_snapshot`: :func:`build_snapshot` of ``table``'s
    slots and the allocations and frees its ledger kept; ``last_requests`` maps a slot
    index to the call site and specs of its last request recorded while unlocked."""
    governor = table.governor
    with governor.mutex:
        return build_snapshot(
            table.slots,
            governor.device,
            governor.alignment,
            last_requests,
            [_trace_entry(*event) for event in governor.ledger.trace],
        )


def _trace_entry(action: str, ptr: int, nbytes: int, what: str, when: float) -> dict[str, Any]:
    """One event of the ledger's trace as an entry of torch's device trace."""
    return {
        "action": _TRACE_ACTIONS[action],
        "addr": ptr,
        "size": nbytes,
        "stream": 0,
        "time_us": int(when * 1e6),
        "device_free": 0,
        "frames": [{"filename": "arena", "line": 0, "name": what}] if what else [],
    }


def build_snapshot(
    slots: Sequence[Slot],
    device: Device,
    alignment: int,
    last_requests: dict[int, tuple[str, Any]],
    trace: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """A ``torch.cuda.memory._snapshot()``-format dict of the arena's memory.

    Call with the arena's mutex held, so the slots do not change meanwhile.
    """
    traces: list[list[dict[str, Any]]] = [[] for _ in range(device.index + 1)]
    traces[device.index] = [dict(e) for e in trace]
    return {
        "segments": memory_segments(slots, device, alignment, last_requests),
        "device_traces": traces,
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "arena_alignment": alignment},
    }


def memory_segments(
    slots: Sequence[Slot],
    device: Device,
    alignment: int,
    last_requests: dict[int, tuple[str, Any]],
) -> list[dict[str, Any]]:
    """One torch segment per block the arena holds, whose figures
    :func:`arena.kernels.memstats.memory_stats` sums by torch's rules (mutex held).

    * a slot's scratch buffer: one ``active_allocated`` block over the bytes requests have
      used (the largest request, at most the capacity), the rest ``inactive``; the views of
      the slot's last request recorded while unlocked are listed in the block's
      ``arena_views`` (offset, size, requested bytes), its call site is the block's frame;
    * a retired buffer or workspace block: one ``inactive`` block;
    * a persistent buffer: one ``active_allocated`` block, requested = the view's bytes;
    * a library workspace or Triton block: one ``active_allocated`` block.
    """
    segments: list[dict[str, Any]] = []
    for slot in slots:
        where = f"slot (ubatch {slot.ubatch}, lane {slot.lane})"
        buffer = slot.buffer
        if buffer.allocation is not None and buffer.allocation.nbytes:
            used = min(slot.high_water, buffer.capacity)
            blocks = _scratch_blocks(buffer, used, alignment, last_requests.get(slot.index))
            segments.append(_segment(device, buffer.allocation.ptr, blocks, f"{where} scratch"))
        for old in slot.retired:
            if old.allocation is not None and old.allocation.nbytes:
                ptr, size = old.allocation.ptr, old.allocation.nbytes
                hold = [_block(ptr, size, 0, "inactive", [])]
                segments.append(_segment(device, ptr, hold, f"{where} retired"))
        for key, entry in list(slot.store(PersistentStore).buffers.items()):
            allocation = entry.allocation
            if not allocation.nbytes:
                continue
            frames = [_frame(f"{where} persistent {key!r}")]
            view = entry.layout.views[0]
            state = "active_allocated"
            block = _block(allocation.ptr, allocation.nbytes, view.nbytes, state, frames)
            segments.append(_segment(device, allocation.ptr, [block], f"{where} persistent"))
        store = slot.store(WorkspaceStore)
        retired = list(store.retired)
        for work in [*store.library.values(), *store.triton.values(), *retired]:
            ptr, size = work.allocation.ptr, work.allocation.nbytes
            state = "inactive" if work in retired else "active_allocated"
            name = f"{where} {'retired ' if state == 'inactive' else ''}{work.describe()}"
            block = _block(ptr, size, size if state != "inactive" else 0, state, [_frame(name)])
            segments.append(_segment(device, ptr, [block], f"{where} {work.kind}"))
    return segments


def _scratch_blocks(
    buffer: Buffer, used: int, alignment: int, last: tuple[str, Any] | None
) -> list[dict[str, Any]]:
    """Blocks covering ``buffer``: the ``used`` bytes, then the free rest."""
    allocation = buffer.allocation
    assert allocation is not None
    base = allocation.ptr
    blocks: list[dict[str, Any]] = []
    if used:
        frames: list[dict[str, Any]] = []
        views: list[dict[str, int]] = []
        if last is not None:
            site, specs = last
            layout = compute_layout(specs, alignment)
            if layout.total <= used:
                frames = [_site_frame(site)]
                ends = [v.offset for v in layout.views[1:]] + [layout.total]
                views = [
                    {"offset": v.offset, "size": end - v.offset, "requested_size": v.nbytes}
                    for v, end in zip(layout.views, ends, strict=True)
                    if end > v.offset
                ]
        block = _block(base, used, used, "active_allocated", frames)
        block["arena_views"] = views
        blocks.append(block)
    if allocation.nbytes > used:
        blocks.append(_block(base + used, allocation.nbytes - used, 0, "inactive", []))
    return blocks


def _segment(
    device: Device, address: int, blocks: list[dict[str, Any]], what: str
) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    requested = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device.index,
        "address": address,
        "total_size": total,
        "allocated_size": active,
        "active_size": active,
        "requested_size": requested,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [_frame(what)],
        "blocks": blocks,
    }


def _block(
    address: int, size: int, requested: int, state: str, frames: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "address": address,
        "size": size,
        "requested_size": requested,
        "state": state,
        "frames": frames,
    }


def _frame(name: str) -> dict[str, Any]:
    return {"filename": "arena", "line": 0, "name": name}


def _site_frame(site: str) -> dict[str, Any]:
    """``file:line:function`` as a torch frame."""
    filename, _, rest = site.partition(":")
    line, _, name = rest.partition(":")
    return {"filename": filename, "line": int(line) if line.isdigit() else 0, "name": name}
