"""Fake memory sources for tests: one that records every call, one that fails on demand."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena import CPU, Allocation, Device, HostSource


@dataclass
class RecordingSource:
    """A host source that records ``("allocate", n)`` and ``("release", n)`` events."""

    events: list[tuple[str, int]] = field(default_factory=list)
    live: dict[int, int] = field(default_factory=dict)
    _inner: HostSource = field(default_factory=HostSource)

    @property
    def device(self) -> Device:
        return CPU

    def allocate(self, nbytes: int) -> Allocation:
        allocation = self._inner.allocate(nbytes)
        self.events.append(("allocate", nbytes))
        self.live[allocation.ptr] = nbytes
        return allocation

    def release(self, allocation: Allocation) -> None:
        self.events.append(("release", allocation.nbytes))
        del self.live[allocation.ptr]

    def allocations(self) -> list[int]:
        return [n for kind, n in self.events if kind == "allocate"]


@dataclass
class FailingSource(RecordingSource):
    """Raises ``MemoryError`` for any request above ``limit`` bytes."""

    limit: int = 1 << 20

    def allocate(self, nbytes: int) -> Allocation:
        if nbytes > self.limit:
            self.events.append(("refuse", nbytes))
            raise MemoryError(f"out of memory: {nbytes} bytes asked, {self.limit} available")
        return super().allocate(nbytes)
