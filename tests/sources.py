"""Fake memory sources for tests: one that records every call, one that fails on demand."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena import CPU, Allocation, Arena, Device, HostSource


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
class DirtySource(RecordingSource):
    """Hands out blocks full of 0xA5, as reused device memory would be."""

    def allocate(self, nbytes: int) -> Allocation:
        allocation = super().allocate(nbytes)
        allocation.owner[:] = 0xA5
        return allocation


@dataclass
class FailingSource(RecordingSource):
    """Raises ``MemoryError`` for any request above ``limit`` bytes."""

    limit: int = 1 << 20

    def allocate(self, nbytes: int) -> Allocation:
        if nbytes > self.limit:
            self.events.append(("refuse", nbytes))
            raise MemoryError(f"out of memory: {nbytes} bytes asked, {self.limit} available")
        return super().allocate(nbytes)


@dataclass
class FaultySource(RecordingSource):
    """Raises ``fault`` at the allocations whose 1-based numbers are in ``fail_at``, and at
    the releases whose numbers are in ``fail_release_at`` (after taking the block back)."""

    fail_at: set[int] = field(default_factory=set)
    fail_release_at: set[int] = field(default_factory=set)
    fault: type[BaseException] = MemoryError
    allocate_calls: int = 0
    release_calls: int = 0

    def allocate(self, nbytes: int) -> Allocation:
        self.allocate_calls += 1
        if self.allocate_calls in self.fail_at:
            self.events.append(("refuse", nbytes))
            raise self.fault(f"injected fault at allocation #{self.allocate_calls}")
        return super().allocate(nbytes)

    def release(self, allocation: Allocation) -> None:
        self.release_calls += 1
        super().release(allocation)
        if self.release_calls in self.fail_release_at:
            raise self.fault(f"injected fault at release #{self.release_calls}")


def check_books(a: Arena, source: RecordingSource | None = None) -> None:
    """Every block the arena took is released or held by it, counted kind by kind: each
    slot's scratch buffer, retired buffers, persistent buffers, library workspaces and
    Triton blocks; and ``source`` (when given) holds exactly those blocks. The one books
    check of the suite (issue 27: tests/gates.py had a second one that left out library
    workspace and Triton bytes)."""
    stats = a.stats()
    assert stats.allocations == stats.frees + stats.live_blocks
    held = sum(
        s.capacity + s.retired_bytes + s.persistent_bytes + s.workspace_bytes + s.triton_bytes
        for s in stats.slots
    )
    assert stats.live_bytes == held, f"live {stats.live_bytes} bytes, held {held}"
    assert stats.reserved_bytes == held
    if source is not None:
        assert len(source.live) == stats.live_blocks
        assert sum(source.live.values()) == stats.live_bytes
