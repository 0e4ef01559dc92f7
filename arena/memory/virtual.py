"""The fixed-address host source (``source="virtual"`` on the host): reserve, commit, evict.

Each block is one anonymous private mapping made with no access and no swap reservation
(``mmap`` with ``PROT_NONE`` and ``MAP_NORESERVE``): address space only, no memory.
Committing ``mprotect``\\ s the first bytes readable and writable (pages become resident
when first touched, as with ``np.empty``); evicting hands the pages back with
``madvise(MADV_DONTNEED)`` and makes them inaccessible again; restoring makes them
accessible again (zero-filled). The base address never changes.

Linux first: the calls are POSIX, but ``MAP_NORESERVE`` and ``MADV_DONTNEED``'s
zero-fill are Linux's; elsewhere :class:`VirtualHostSource` raises :class:`ArenaError`.

The mapping is unmapped by the interpreter once the last NumPy array over it is gone, so
views keep their memory alive after :meth:`~arena.Arena.close` like every other source.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
from typing import Any

from arena.errors import ArenaError
from arena.memory.devices import CPU, Device
from arena.memory.sources import Allocation, reserved_range

__all__ = ["DEFAULT_HOST_RESERVE", "PAGE", "VirtualHostSource", "host_reserve_default"]

#: The host's page size: the commit granularity.
PAGE = mmap.PAGESIZE

_PROT_NONE = 0
_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
# Not exported by Python's mmap module; the Linux value (the same on x86-64 and arm64).
_MAP_NORESERVE = 0x4000

#: Ranges at least this large ask for transparent huge pages (as NumPy does from 4 MiB).
_HUGE = 4 << 20

#: The reservation when neither ``max_bytes`` nor ``reserve`` is given: the host's
#: physical memory (a slot cannot usefully commit more), or 64 GiB where it is unknown.
DEFAULT_HOST_RESERVE = 64 << 30


def host_reserve_default() -> int:
    """Bytes of address space a host slot reserves by default: the physical memory."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX sysconf name here
        return DEFAULT_HOST_RESERVE


def _round(nbytes: int) -> int:
    return -(-nbytes // PAGE) * PAGE


class _Range:
    """One reserved mapping: its NumPy array (whole range, never handed out), its committed
    bytes and ``window``, the array over the committed bytes alone that owners slice."""

    __slots__ = ("array", "committed", "head", "mapping", "ptr", "size", "window")

    def __init__(self, size: int, protect: Any, alignment: int = PAGE) -> None:
        import numpy as np

        # An alignment above a page: the range starts at the first multiple of it inside a
        # mapping that much larger (the pages before it are never made accessible).
        extra = alignment - PAGE if alignment > PAGE else 0
        try:
            mapping = mmap.mmap(
                -1,
                size + extra,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE,
                # Writable for Python's buffer (its access mode follows prot); made
                # inaccessible at once below, before anything can touch it.
                prot=_PROT_RW,
            )
        except (OSError, OverflowError, ValueError) as exc:
            raise MemoryError(f"cannot reserve {size} bytes of address space: {exc}") from exc
        # The array exports the mapping's buffer: the mapping lives (and stays mapped)
        # as long as any array over it, so views keep their memory alive.
        self.mapping = mapping
        self.array = np.frombuffer(mapping, dtype=np.uint8)
        start = int(self.array.__array_interface__["data"][0])
        self.head = -start % alignment if extra else 0  # bytes before the range
        self.ptr = start + self.head
        self.size = size
        self.committed = 0
        self.window = self.array[:0]
        protect(start, size + extra, _PROT_NONE)
        # Transparent huge pages where the system gives them on request, as NumPy asks
        # for its large arrays (the default source's): page faults cost 512x less.
        hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
        if hugepage is not None and size >= _HUGE:
            with contextlib.suppress(OSError):
                mapping.madvise(hugepage)

    def owner(self, nbytes: int) -> Any:
        """The first ``nbytes`` as an array whose ``base`` is :attr:`window`.

        A view's ``base`` is the array it was sliced from (NumPy collapses a chain of views
        to the first array whose own base is not an array): were that the whole reserved
        range, ``repr(view.base)`` would read pages never committed and the process would
        die of a segmentation fault. The window covers the committed bytes alone.
        """
        return self.window[:nbytes]

    def committed_to(self, end: int) -> None:
        """Record that the first ``end`` bytes are committed; a new window over them."""
        import numpy as np

        # Over a memoryview cut to the committed bytes, so that the window's own base
        # (reachable as ``view.base.base``) covers no more than they do either. Built
        # before it is installed: an interrupt leaves the old pair, both true.
        head = self.head
        window = np.frombuffer(memoryview(self.mapping)[head : head + end], dtype=np.uint8)
        self.committed, self.window = end, window


class VirtualHostSource:
    """Host memory at fixed addresses: a :class:`~arena.memory.sources.FixedAddressSource`.

    Parameters
    ----------
    reserve : int, optional
        Bytes of address space each growable block (a slot's scratch) reserves; default
        the arena's ``max_bytes``, else :func:`host_reserve_default`. Address space costs
        no memory.
    alignment : int, optional
        Where each block starts: a multiple of this power of two (default, and at least,
        a page); an arena passes its ``alignment`` where it is larger.

    Raises
    ------
    ArenaError
        On a system other than Linux.
    """

    def __init__(self, reserve: int | None = None, alignment: int = PAGE) -> None:
        if not sys.platform.startswith("linux"):
            raise ArenaError(
                f"source='virtual' on the host needs Linux (mmap with MAP_NORESERVE, "
                f"mprotect, madvise(MADV_DONTNEED)); this is {sys.platform}. Use "
                "source='host' (the default) here"
            )
        self.reserve_bytes = _round(reserve if reserve is not None else host_reserve_default())
        self.alignment = max(PAGE, alignment)
        self._ranges: dict[int, _Range] = {}
        self._guard = threading.Lock()
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        self._libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

    @property
    def device(self) -> Device:
        """Always the host."""
        return CPU

    # ------------------------------------------------------------------ MemorySource
    def allocate(self, nbytes: int) -> Allocation:
        """A block of ``nbytes`` at fixed addresses (reserved exactly, all committed)."""
        return self._make(nbytes, _round(nbytes))

    def release(self, allocation: Allocation) -> None:
        """Forget the range; the interpreter unmaps it once no view holds it."""
        with self._guard:
            self._ranges.pop(allocation.ptr, None)

    # ------------------------------------------------------------------ FixedAddressSource
    def reserve(self, nbytes: int) -> Allocation:
        """``nbytes`` committed at the start of a range of the source's reservation; where
        the address space is limited (``ulimit -v``), the largest range that halving
        the reservation finds, never less than ``nbytes``."""
        need = _round(nbytes)
        size = max(need, self.reserve_bytes)
        while True:
            try:
                return self._make(nbytes, size)
            except MemoryError:
                if size <= need:
                    raise
                size = max(need, _round(size // 2))

    def commit(self, allocation: Allocation, nbytes: int) -> Allocation:
        """The block grown (or cut, for the arena's books: nothing is decommitted, views
        may still read it) to ``nbytes`` at the same address."""
        space = self._range(allocation)
        if nbytes > space.size:
            raise MemoryError(
                f"{nbytes} bytes do not fit the {space.size} bytes of address space reserved "
                "at this block; give the arena a larger max_bytes (the reservation)"
            )
        end = _round(nbytes)
        if end > space.committed:
            self._protect(space.ptr + space.committed, end - space.committed, _PROT_RW)
            space.committed_to(end)
        return Allocation(space.ptr, nbytes, space.owner(nbytes), CPU)

    def reserved(self, allocation: Allocation) -> int:
        """Bytes of address space reserved for ``allocation``."""
        return self._range(allocation).size

    def settle(self) -> None:
        """Nothing is queued on host memory."""

    def evict(self, allocation: Allocation) -> None:
        """Return the committed pages to the system; the range stays, inaccessible."""
        space = self._range(allocation)
        if space.committed:
            self._call("madvise", space.ptr, space.committed, mmap.MADV_DONTNEED)
            self._protect(space.ptr, space.committed, _PROT_NONE)

    def restore(self, allocation: Allocation) -> None:
        """Make the committed pages accessible again (zero-filled)."""
        space = self._range(allocation)
        if space.committed:
            self._protect(space.ptr, space.committed, _PROT_RW)

    def offload(self, allocation: Allocation) -> Any:
        """A copy of the block's bytes in ordinary host memory."""
        return allocation.owner.copy()

    def upload(self, allocation: Allocation, copy: Any) -> None:
        """Write the copy back into the block."""
        allocation.owner[: len(copy)] = copy

    def fill(self, allocation: Allocation, byte: int) -> None:
        """Set every committed byte of the block's range to ``byte``: all that
        :meth:`evict` discarded, the bytes past a block cut for the books
        (:meth:`commit`) included, which views handed out before the cut still read."""
        space = self._range(allocation)
        space.window.fill(byte)

    def __repr__(self) -> str:
        if self.alignment > PAGE:
            return f"VirtualHostSource(reserve={self.reserve_bytes}, alignment={self.alignment})"
        return f"VirtualHostSource(reserve={self.reserve_bytes})"

    # ------------------------------------------------------------------ internals
    def _make(self, nbytes: int, size: int) -> Allocation:
        alignment = self.alignment
        # The page alignment is the range's own (its default argument).
        space = (
            _Range(size, self._protect)
            if alignment <= PAGE
            else _Range(size, self._protect, alignment)
        )
        end = _round(nbytes)
        if end:
            self._protect(space.ptr, end, _PROT_RW)
        space.committed_to(end)
        with self._guard:
            self._ranges[space.ptr] = space
        return Allocation(space.ptr, nbytes, space.owner(nbytes), CPU)

    def _range(self, allocation: Allocation) -> _Range:
        return reserved_range(self._ranges, self._guard, allocation, self)

    def _protect(self, ptr: int, nbytes: int, prot: int) -> None:
        self._call("mprotect", ptr, nbytes, prot)

    def _call(self, name: str, ptr: int, nbytes: int, flag: int) -> None:
        if getattr(self._libc, name)(ptr, nbytes, flag) != 0:
            errno = ctypes.get_errno()
            message = f"{name}({ptr:#x}, {nbytes}, {flag}) failed: {os.strerror(errno)}"
            if errno == 12:  # ENOMEM: the kernel's map count or memory is exhausted
                raise MemoryError(message)
            raise OSError(errno, message)
