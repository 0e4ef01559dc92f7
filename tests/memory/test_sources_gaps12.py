"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through.

``arena/memory/sources.py`` (the host table filled on first need, the compiled host
allocation chosen where it is in use, the zero-byte block of every device) and
``arena/memory/virtual.py``.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from arena.base.extensions import numpy_array_api
from arena.memory import sources
from arena.memory.devices import CPU, Device
from arena.memory.sources import HostSource, empty_allocation, host_allocator
from tests.faketorch import host_torch_empty


@pytest.fixture
def host_table_from_nothing() -> Iterator[None]:
    """``sources._HOST_EMPTY`` emptied, as in a new process that never allocated on the
    host, and put back afterwards (an earlier test, or a forked mutmut run, filled it)."""
    kept = list(sources._HOST_EMPTY)
    sources._HOST_EMPTY.clear()
    try:
        yield
    finally:
        sources._HOST_EMPTY[:] = kept


def _compiled_expected() -> bool:
    """Whether the compiled host allocation should be in use here."""
    return sources.compiled is not None and numpy_array_api() is not None


def test_the_host_table_is_filled_on_first_need_with_the_allocation_in_use(
    host_table_from_nothing: None,
) -> None:
    allocator = host_allocator()  # fills the table from nothing
    empty, dtype, made, tries = sources._HOST_EMPTY
    assert empty is np.empty and dtype == np.dtype(np.uint8)
    if _compiled_expected():
        # The compiled allocation is chosen wherever the extension and NumPy's table are in
        # use, and host_allocator() names its HostAllocator, whose tries the table keeps.
        assert made is not None and allocator is made.__self__
        assert tries == allocator.tries
    else:
        assert made is None and allocator is None and tries is None
    block = HostSource().allocate(100)
    assert block.nbytes == 100 and block.ptr % sources.HOST_ALIGNMENT == 0
    assert block.owner.dtype == np.uint8 and block.device is CPU


def test_a_first_host_allocation_fills_the_table_itself(host_table_from_nothing: None) -> None:
    block = HostSource().allocate(5000)
    assert len(sources._HOST_EMPTY) == 4
    assert block.nbytes == block.owner.nbytes == 5000
    assert (host_allocator() is None) is not _compiled_expected()


def test_the_empty_host_block_is_a_zero_byte_uint8_array_at_its_own_address() -> None:
    block = empty_allocation(CPU)
    assert block.nbytes == 0 and block.device is CPU
    assert isinstance(block.owner, np.ndarray)
    assert block.owner.dtype == np.uint8 and block.owner.shape == (0,)
    assert block.ptr == block.owner.__array_interface__["data"][0]


def test_the_empty_cuda_block_without_cupy_is_a_torch_tensor_at_its_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    from arena.memory import devices

    monkeypatch.setattr(devices, "cupy_device_count", lambda: 0)
    asked = host_torch_empty(monkeypatch, torch)
    device = Device("cuda", 1)
    block = empty_allocation(device)
    assert asked == ["cuda:1"]
    assert block.device == device and block.nbytes == 0
    assert isinstance(block.ptr, int) and block.ptr == block.owner.data_ptr()
    assert block.owner.dtype == torch.uint8


def _vm_flags(address: int) -> list[str] | None:
    """The ``VmFlags`` of the mapping of this process that holds ``address`` (Linux), or
    None where ``/proc/self/smaps`` cannot be read."""
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(" ", 1)[0]
        if "-" in head and not line.endswith(":") and ":" not in head:
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the virtual source is Linux's")
def test_a_large_virtual_range_asks_for_huge_pages_and_a_small_one_does_not() -> None:
    from arena.memory import virtual

    hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
    probe = mmap.mmap(-1, virtual._HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if hugepage is None:
            pytest.skip("no MADV_HUGEPAGE here")
        try:
            probe.madvise(hugepage)
        except OSError:
            pytest.skip("this kernel refuses MADV_HUGEPAGE")
    finally:
        probe.close()
    source = virtual.VirtualHostSource(reserve=virtual._HUGE)
    large = source.reserve(virtual.PAGE)
    small = source.allocate(virtual.PAGE)
    flags = _vm_flags(large.ptr)
    if flags is None:
        pytest.skip("/proc/self/smaps has no VmFlags here")
    assert "hg" in flags
    assert "hg" not in (_vm_flags(small.ptr) or [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the virtual source is Linux's")
def test_an_aligned_virtual_range_maps_only_the_pages_its_alignment_needs() -> None:
    from arena.memory import virtual

    alignment = 16 * virtual.PAGE
    source = virtual.VirtualHostSource(reserve=4 * virtual.PAGE, alignment=alignment)
    block = source.reserve(virtual.PAGE)
    assert block.ptr % alignment == 0 and source.reserved(block) == 4 * virtual.PAGE
    space = source._ranges[block.ptr]
    # The range starts at the first multiple of the alignment inside a mapping larger by
    # alignment - PAGE bytes: the least that always holds one (mappings start at a page).
    assert len(space.mapping) == 4 * virtual.PAGE + alignment - virtual.PAGE
