"""Per-slot state: one scratch buffer, its prepared views, and persistent buffers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .layout import Layout
from .sources import Allocation

__all__ = ["PersistentBuffer", "Prepared", "Slot"]

#: A prepared request: (bytes it needs, its typed views, their shapes).
Prepared = tuple[int, list[Any], tuple[tuple[int, ...], ...]]


@dataclass(slots=True)
class PersistentBuffer:
    """A persistent buffer: its own allocation, never part of the scratch buffer."""

    allocation: Allocation
    layout: Layout
    views: dict[str, Any] = field(default_factory=dict)


class Slot:
    """State of one (ubatch, lane) slot.

    ``prepared`` maps a framework name to a dict of request signature -> typed views built
    over the current buffer; ``buffers`` maps a framework name to that framework's wrapper
    of the buffer (one DLPack import per growth). Both are dropped on growth, before the
    old buffer is released.
    """

    __slots__ = (
        "allocation",
        "buffers",
        "calls",
        "capacity",
        "growths",
        "high_water",
        "index",
        "lane",
        "pending",
        "persistent",
        "prepared",
        "resources",
        "ubatch",
    )

    def __init__(self, index: int, ubatch: int, lane: int) -> None:
        self.index = index
        self.ubatch = ubatch
        self.lane = lane
        self.allocation: Allocation | None = None
        self.capacity = 0
        # Bytes a sibling grew to: this slot grows to match at its own next call.
        self.pending = 0
        self.buffers: dict[str, Any] = {}
        self.prepared: dict[str, dict[Any, Prepared]] = {}
        self.persistent: dict[Any, PersistentBuffer] = {}
        self.resources: dict[Any, Any] = {}
        self.calls = 0
        self.growths = 0
        self.high_water = 0

    def drop_views(self) -> None:
        """Forget every framework wrapper and prepared view of the scratch buffer."""
        self.buffers = {}
        self.prepared = {}

    @property
    def persistent_bytes(self) -> int:
        """Bytes held by persistent buffers."""
        return sum(p.allocation.nbytes for p in self.persistent.values())

    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        return f"(ubatch {self.ubatch}, lane {self.lane})"
