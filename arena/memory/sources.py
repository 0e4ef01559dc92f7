"""Memory sources: where slot buffers come from.

A source is a small object in the style of Numba's External Memory Management plugins:
``allocate(nbytes)`` returns an :class:`Allocation` and ``release(allocation)`` gives it
back. The arena calls nothing else, so a test can substitute a recording or failing source
and check exactly which allocations and frees happen.

Release semantics: the arena drops its own references before calling ``release``; memory
actually returns to the system once no view still references ``allocation.owner``. That is
what makes views outlive growth and :meth:`~arena.Arena.close` safely.

Fixed-address sources (:class:`FixedAddressSource`, ``source="virtual"``) add one
capability: a block is an address range reserved once, into which memory is committed
as it grows, released while the arena sleeps and committed again at the same addresses
on wake. The slot uses it through :func:`fixed_address` and the protocol's methods alone,
whatever the memory (host pages or CUDA physical memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from ctypes import addressof, c_char
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from arena.base.extensions import load_extension, numpy_array_api
from arena.errors import ArenaError, ArenaOutOfMemoryError
from arena.memory.devices import CPU, Device

__all__ = [
    "HOST_ALIGNMENT",
    "AlignedHostSource",
    "Allocation",
    "FixedAddressSource",
    "HostSource",
    "MemorySource",
    "empty_allocation",
    "fixed_address",
    "host_allocator",
    "host_refused",
    "reserved_range",
]

#: Base-address alignment of host allocations: one page, enough for every SIMD width and
#: for JAX's 64-byte zero-copy requirement.
HOST_ALIGNMENT = 4096


@dataclass(frozen=True, slots=True)
class Allocation:
    """One block of memory handed out by a source.

    Attributes
    ----------
    ptr : int
        Address of the first byte.
    nbytes : int
        Usable size in bytes.
    owner : Any
        A 1-D ``uint8`` array of exactly ``nbytes`` over the block. Holding it keeps the
        memory alive; adapters build every view from it. Its type depends on the memory:

        - host memory (including pinned): a NumPy array;
        - device memory where CuPy is installed and sees the device: a CuPy array (the
          torch source wraps its tensor in one, so the CuPy front works too);
        - device memory from the torch source without a usable CuPy: the ``torch.uint8``
          CUDA tensor itself (torch, JAX and, once CuPy is installed, CuPy adapters accept
          it: each reads it through DLPack or its pointer).

        Code that touches ``owner`` directly must not assume more than a 1-D ``uint8``
        array with ``__dlpack__``: zero it with the framework's own call (``fill(0)`` on
        NumPy and CuPy, ``zero_()`` on torch).
    device : Device
        Where the memory lives.
    """

    ptr: int
    nbytes: int
    owner: Any
    device: Device


#: What HostSource.allocate builds an Allocation with: ``object.__new__`` and the slot
#: descriptors' setters, which is all the frozen dataclass's generated __init__ does.
_new_allocation = object.__new__
_set_ptr = Allocation.__dict__["ptr"].__set__
_set_nbytes = Allocation.__dict__["nbytes"].__set__
_set_owner = Allocation.__dict__["owner"].__set__
_set_device = Allocation.__dict__["device"].__set__

#: The compiled host allocation (arena/memory/_host.c), or None where it is not in use
#: (not built, or ``ARENA_PURE_PYTHON`` set); and why.
compiled, WHY_PYTHON = load_extension("arena.memory._host")

#: ``(np.empty, np.dtype("uint8"), allocate, tries)`` once NumPy is first needed (``import
#: arena`` imports no framework): ``allocate`` the compiled ``HostAllocator.allocate``, or
#: None (:meth:`HostSource.allocate` then runs its Python version; a test sets it None to
#: compare the two), and ``tries`` its ``HostAllocator.tries`` (None with it); a list, so
#: that filling it is one store.
_HOST_EMPTY: list[Any] = []


def _host_empty() -> Any:
    """``np.empty``, with the dtype it allocates host blocks of and the compiled allocation
    kept beside it."""
    import numpy as np

    if not _HOST_EMPTY:
        allocate = _host_allocator(np)
        tries = None if allocate is None else allocate.__self__.tries
        _HOST_EMPTY[:] = [np.empty, np.dtype(np.uint8), allocate, tries]
    return np.empty


def host_allocator() -> Any:
    """The compiled ``HostAllocator`` behind :meth:`HostSource.allocate` (NumPy imported
    on first need), or None where :meth:`HostSource.allocate` runs its Python version."""
    if not _HOST_EMPTY:
        _host_empty()
    made = _HOST_EMPTY[2]
    return None if made is None else made.__self__


def _host_allocator(np: Any) -> Any:
    """The compiled ``HostAllocator(...).allocate`` over NumPy's C-API table, or None where
    the extension is not in use or this NumPy's table is not the one it knows."""
    if compiled is None:
        return None
    api = numpy_array_api()
    if api is None:
        return None
    try:
        allocator = compiled.HostAllocator(
            Allocation,
            CPU,
            api,
            np.ndarray,
            np.dtype,
            np.dtype(np.uint8),
            HOST_ALIGNMENT,
            host_refused,  # what the compiled growth (HostBooks) raises NumPy's refusal as
        )
    except TypeError:  # a NumPy whose C-API table is not the one the extension knows
        return None
    return allocator.allocate


def host_refused(nbytes: int) -> ArenaOutOfMemoryError:
    """The error of a host allocation of ``nbytes`` that NumPy refused (out of memory, or
    past what it indexes), raised from NumPy's error wherever it is at hand, by the Python
    and the compiled host allocation alike (the same text on both: the compiled one does
    not keep NumPy's).

    An :class:`~arena.ArenaOutOfMemoryError` (an ``ArenaError`` and a ``MemoryError``)
    naming the bytes and what to do. The allocation is tried once: asking again at once
    would only wait for the same refusal.
    """
    return ArenaOutOfMemoryError(
        f"cannot allocate {nbytes} bytes of host memory; free host memory or request "
        "less (max_bytes= caps what an arena asks for)"
    )


@runtime_checkable
class MemorySource(Protocol):
    """What the arena needs from a memory provider."""

    @property
    def device(self) -> Device:
        """The device the memory lives on."""
        ...

    def allocate(self, nbytes: int) -> Allocation:
        """Return a block of at least ``nbytes`` (``nbytes >= 1``) aligned to >= 256 bytes.

        Raises ``MemoryError`` (or a subclass) when the memory is not available.
        """
        ...

    def release(self, allocation: Allocation) -> None:
        """Take back a block the arena no longer references.

        Views built from ``allocation.owner`` may still exist: the memory must stay valid
        until the last reference to ``allocation.owner`` is gone (refcounted memory such
        as NumPy, CuPy and torch blocks does this by itself).
        """
        ...


@runtime_checkable
class FixedAddressSource(MemorySource, Protocol):
    """A source whose blocks never move: growth, sleep and wake keep every address.

    A block from :meth:`reserve` is an address range of :meth:`reserved` bytes with its
    first ``nbytes`` committed; :meth:`commit` commits more of it at the same base. Every
    block (from ``allocate`` too) can have its memory released while its addresses stay
    reserved (:meth:`evict`) and committed again (:meth:`restore`).
    """

    def reserve(self, nbytes: int) -> Allocation:
        """A block of ``nbytes`` committed at the start of a range reserved for growth
        (its size: the source's reservation, or ``nbytes`` if larger).

        Raises ``MemoryError`` when the range or the memory is not available.
        """
        ...

    def commit(self, allocation: Allocation, nbytes: int) -> Allocation:
        """The same block grown to ``nbytes`` at the same address: a new
        :class:`Allocation` with the same ``ptr``; ``allocation`` stays valid.

        Raises ``MemoryError`` past the reserved range or when memory is not available
        (nothing is committed then).
        """
        ...

    def reserved(self, allocation: Allocation) -> int:
        """Bytes of address space reserved for ``allocation``."""
        ...

    def settle(self) -> None:
        """Wait for the work queued on the source's memory (before :meth:`evict`)."""
        ...

    def evict(self, allocation: Allocation) -> None:
        """Release the block's memory, keeping its addresses reserved; touching it faults
        until :meth:`restore`."""
        ...

    def restore(self, allocation: Allocation) -> None:
        """Commit the block's memory again at the same addresses (contents undefined).

        Raises ``MemoryError`` when memory is not available (nothing committed then).
        """
        ...

    def offload(self, allocation: Allocation) -> Any:
        """A host copy of the block's bytes (pinned memory on CUDA)."""
        ...

    def upload(self, allocation: Allocation, copy: Any) -> None:
        """Write back the bytes :meth:`offload` copied."""
        ...

    def fill(self, allocation: Allocation, byte: int) -> None:
        """Set every byte :meth:`evict` discarded to ``byte``: the block's whole committed
        range, past a size :meth:`commit` cut it to included (views handed out before
        the cut still read those bytes)."""
        ...


def fixed_address(source: MemorySource) -> bool:
    """Whether ``source``'s blocks keep their addresses through growth, sleep and wake."""
    return isinstance(source, FixedAddressSource)


class HostSource:
    """Host memory from NumPy, page-aligned.

    ``np.empty`` only guarantees 16-byte alignment, so each block over-allocates one page
    and starts at the first page boundary inside it.
    """

    #: Where each block starts: a multiple of this many bytes (a page; an
    #: :class:`AlignedHostSource` sets its own).
    alignment = HOST_ALIGNMENT

    @property
    def device(self) -> Device:
        """Always the host."""
        return CPU

    def allocate(self, nbytes: int) -> Allocation:
        """Allocate ``nbytes`` of host memory starting at a multiple of :attr:`alignment`.

        Made in C where the extension ``arena.memory._host`` is in use (the same calls,
        the same object: tests/memory/test_host_compiled.py compares the two); else, and
        wherever the C version declines (an argument it does not take), by the Python
        below, which it mirrors. NumPy's refusal is raised by whichever asked it, once
        (:func:`host_refused`): the Python version does not ask again.

        Raises
        ------
        ArenaOutOfMemoryError
            The memory is not available (a ``MemoryError``), naming the bytes.
        """
        empty = _HOST_EMPTY[0] if _HOST_EMPTY else _host_empty()
        alignment = self.alignment
        made = _HOST_EMPTY[2]
        if made is not None and alignment == HOST_ALIGNMENT:  # the C one aligns to a page
            block = made(nbytes)
            if block is not None:
                return block  # type: ignore[no-any-return]
            if _HOST_EMPTY[3](nbytes):  # NumPy was asked, and refused: not asked again
                raise host_refused(nbytes)
        try:
            raw = empty(nbytes + alignment, _HOST_EMPTY[1])
        except (MemoryError, ValueError, OverflowError) as exc:  # out of memory, or too big
            raise host_refused(nbytes) from exc
        # The address through a ctypes view of the array's buffer: a third of the cost of
        # reading ``__array_interface__`` (a dictionary built per call) on a growth's path.
        address = addressof(c_char.from_buffer(raw))
        start = -address % alignment
        # Built as the dataclass's __init__ builds it, without its four object.__setattr__
        # look-ups (a third of a host allocation's cost, issue 32 item 4): the same frozen
        # Allocation (tests/memory/test_sources.py compares the two field by field).
        allocation = _new_allocation(Allocation)
        _set_ptr(allocation, address + start)
        _set_nbytes(allocation, nbytes)
        _set_owner(allocation, raw[start : start + nbytes])
        _set_device(allocation, CPU)
        return allocation

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: NumPy frees the block once the last view of it is gone."""

    def __repr__(self) -> str:
        return "HostSource()"


class AlignedHostSource(HostSource):
    """Host memory from NumPy whose blocks start at a multiple of ``alignment`` bytes, a
    power of two above a page: the host source of an arena whose ``alignment`` exceeds
    :data:`HOST_ALIGNMENT`, so that a view's address, not only its offset, is a multiple
    of it. Each block over-allocates ``alignment`` bytes and starts at the first boundary
    inside them (:meth:`HostSource.allocate`, which reads :attr:`alignment`).

    Parameters
    ----------
    alignment : int
        A power of two from :data:`HOST_ALIGNMENT` to 2**30.
    """

    def __init__(self, alignment: int) -> None:
        from arena.base.layout import check_alignment

        self.alignment = max(check_alignment(alignment), HOST_ALIGNMENT)

    def __repr__(self) -> str:
        return f"AlignedHostSource(alignment={self.alignment})"


def empty_allocation(device: Device) -> Allocation:
    """A zero-byte block on ``device`` that no memory source is asked for.

    Zero-byte requests on a slot that never grew get their (empty) views from it, so they
    work even while locked and never allocate a slot buffer. On CUDA its owner follows the
    rule of :attr:`Allocation.owner`: a CuPy array where CuPy sees the device, else an
    empty torch CUDA tensor (a torch-backed arena without CuPy).
    """
    if device.is_cuda:
        from arena.memory.devices import cupy_device_count

        if cupy_device_count() > device.index:
            import cupy

            with cupy.cuda.Device(device.index):
                array = cupy.ndarray((0,), dtype=cupy.uint8)
            return Allocation(int(array.data.ptr), 0, array, device)
        import torch

        tensor = torch.empty(0, dtype=torch.uint8, device=f"cuda:{device.index}")
        return Allocation(int(tensor.data_ptr()), 0, tensor, device)
    import numpy as np

    array = np.empty(0, dtype=np.uint8)
    return Allocation(int(array.__array_interface__["data"][0]), 0, array, device)


_Range = TypeVar("_Range")


def reserved_range(
    ranges: Mapping[int, _Range],
    guard: AbstractContextManager[Any],
    allocation: Allocation,
    source: object,
) -> _Range:
    """The reserved range of a fixed-address ``source`` that ``allocation`` starts, read
    from ``ranges`` (base address -> range) under the source's ``guard``.

    Raises
    ------
    ArenaError
        ``allocation`` is not one of the source's ranges (released, or from another
        source): a bug in arena.
    """
    with guard:
        space = ranges.get(allocation.ptr)
    if space is None:
        raise ArenaError(
            f"the block at {allocation.ptr:#x} is not one of {source!r}'s reserved ranges "
            "(released, or from another source); this is a bug in arena"
        )
    return space
