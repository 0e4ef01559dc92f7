"""The fixed-address CUDA source (``arena.memory.cudavm``) against a recording fake of the
driver, and on a real GPU (``gpu``-marked).

The fake backs every reserved range with host memory and records each driver call; the
tests check the order the issue asks for: one reserve per slot, create / map / set-access
per growth, the streams and the context synchronised before anything is unmapped, nothing
mapped or unmapped during a capture, the same address on wake, and everything unmapped,
released and freed once the arena is closed and its views are gone.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError, GraphCaptureError
from arena.memory import devices
from arena.memory.cudavm import VirtualCudaSource
from arena.memory.devices import Device
from tests.fakecupy import with_arrays
from tests.gates import Probe
from tests.memory.test_cuda_fakes import CUDA0, _load_cupy_front, fake_cupy

GRANULARITY = 64 << 10
MiB = 1 << 20


class RecordingDriver:
    """A fake CUDA driver over host memory that records every call."""

    def __init__(self, total: int = 64 * MiB) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.total = total
        self.ranges: dict[int, np.ndarray] = {}  # base -> host bytes standing in
        self.mapped: dict[int, tuple[int, int]] = {}  # address -> (size, handle)
        self.handles: set[int] = set()
        self.next_handle = 1
        self.fail_create = False
        self.current: Any = None

    def log(self, *call: Any) -> None:
        self.calls.append(call)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def retain(self, device: int) -> Any:
        self.log("retain", device)
        return ("primary", device)

    def push(self, context: Any) -> None:
        self.current = context

    def granularity(self, device: int) -> int:
        return GRANULARITY

    def total_memory(self, device: int) -> int:
        return self.total

    def _in_context(self) -> None:
        assert self.current == ("primary", 0), "a driver call outside the primary context"

    def address_reserve(self, size: int, alignment: int) -> int:
        self._in_context()
        raw = np.zeros(size + alignment, np.uint8)
        base = raw.ctypes.data + (-raw.ctypes.data % alignment)
        self.ranges[base] = raw
        self.log("reserve", base, size)
        return base

    def address_free(self, ptr: int, size: int) -> None:
        self._in_context()
        assert not any(ptr <= a < ptr + size for a in self.mapped), "freed while mapped"
        del self.ranges[ptr]
        self.log("address_free", ptr, size)

    def create(self, size: int, device: int) -> int:
        self._in_context()
        if self.fail_create:
            raise MemoryError("CUDA_ERROR_OUT_OF_MEMORY (fake)")
        handle = self.next_handle
        self.next_handle += 1
        self.handles.add(handle)
        self.log("create", size, handle)
        return handle

    def release(self, handle: int) -> None:
        self.handles.remove(handle)
        self.log("release", handle)

    def map(self, ptr: int, size: int, handle: int) -> None:
        assert size % GRANULARITY == 0 and ptr % GRANULARITY == 0
        self.mapped[ptr] = (size, handle)
        self.log("map", ptr, size, handle)

    def unmap(self, ptr: int, size: int) -> None:
        assert self.mapped.pop(ptr)[0] == size
        self.log("unmap", ptr, size)

    def set_access(self, ptr: int, size: int, device: int) -> None:
        assert ptr in self.mapped
        self.log("set_access", ptr, size)

    def synchronize(self) -> None:
        self.log("synchronize")

    def memset(self, ptr: int, byte: int, size: int) -> None:
        ctypes.memset(ptr, byte, size)
        self.log("memset", ptr, size)

    def copy_to_host(self, host: int, ptr: int, size: int) -> None:
        ctypes.memmove(host, ptr, size)
        self.log("copy_to_host", ptr, size)

    def copy_to_device(self, ptr: int, host: int, size: int) -> None:
        ctypes.memmove(ptr, host, size)
        self.log("copy_to_device", ptr, size)


class RecordingEvents:
    """Stream events that record into the driver's log (one stream, id 7)."""

    def __init__(self, driver: RecordingDriver) -> None:
        self.driver = driver

    def streams(self, handles: Any) -> list[Any]:
        return [7, *handles]

    def record(self, stream: Any) -> Any:
        self.driver.log("event_record", stream)
        return stream

    def done(self, event: Any) -> bool:
        return True

    def wait(self, event: Any) -> None:
        self.driver.log("event_wait", event)

    def synchronize(self) -> None:
        self.driver.log("device_synchronize")


def _source(driver: RecordingDriver, cupy: Any, reserve: int = 8 * MiB) -> VirtualCudaSource:
    def wrap(ptr: int, nbytes: int, keeper: Any, device: Device) -> Any:
        memory = cupy.cuda.UnownedMemory(ptr, nbytes, keeper, 0)
        return cupy.ndarray((nbytes,), cupy.uint8, cupy.cuda.MemoryPointer(memory, 0))

    return VirtualCudaSource(
        CUDA0, reserve=reserve, driver=driver, wrap=wrap, events=RecordingEvents(driver)
    )


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in CuPy for one test; the cached device counts are forgotten before and
    after, so that no later test counts the stand-in's device (a page of GPU examples
    in tests/test_docs.py then ran without a GPU)."""
    module = with_arrays(fake_cupy())
    devices.forget_device_counts()
    _load_cupy_front(monkeypatch, module)
    yield module
    devices.forget_device_counts()


def test_the_driver_calls_come_in_order(cupy: Any) -> None:
    driver = RecordingDriver()
    probe = Probe()
    source = _source(driver, cupy)
    assert driver.names() == ["retain"]  # the primary context, made explicit
    a = Arena(source=source, framework="cupy", capture_probe=probe)
    (first,) = a.cupy.get_simultaneous(((100,), "uint8"))
    base = first.data.ptr
    first[...] = 3
    # One reserve of the whole range, then one chunk created, mapped and made accessible.
    assert driver.names()[1:] == ["reserve", "create", "map", "set_access"]
    assert driver.calls[1] == ("reserve", base, 8 * MiB)
    driver.calls.clear()
    (grown,) = a.cupy.get_simultaneous(((3 * GRANULARITY,), "uint8"))
    assert grown.data.ptr == base
    # Growth: the next bytes only, at the range's next address; no new reserve.
    assert driver.calls == [
        ("create", 2 * GRANULARITY, 2),
        ("map", base + GRANULARITY, 2 * GRANULARITY, 2),
        ("set_access", base + GRANULARITY, 2 * GRANULARITY),
    ]
    assert first.get().tolist() == [3] * 100
    kept = a.cupy.get_persistent("kv", (10,), "int32")
    kept[...] = np.arange(10, dtype=np.int32)
    driver.calls.clear()

    probe.capturing = True  # nothing is mapped or unmapped during a capture
    with pytest.raises(GraphCaptureError):
        a.sleep()
    with pytest.raises(GraphCaptureError):
        a.cupy.get_simultaneous(((8 * GRANULARITY,), "uint8"))
    assert driver.calls == []
    probe.capturing = False

    a.sleep(level=1)
    names = driver.names()
    first_unmap = names.index("unmap")
    # The persistent buffer is copied out, then the streams and the context are waited
    # for, before the first unmap.
    assert names.index("copy_to_host") < names.index("event_wait") < first_unmap
    assert names.index("synchronize") < first_unmap
    assert names[first_unmap:].count("unmap") == 3  # two scratch chunks, one persistent
    assert names.count("release") == 3 and "address_free" not in names
    assert driver.mapped == {}
    driver.calls.clear()

    a.wake()
    maps = [c for c in driver.calls if c[0] == "map"]
    assert {c[1] for c in maps} == {base, kept.data.ptr}  # the same addresses
    assert driver.names()[-1] == "copy_to_device"
    assert kept.get().tolist() == list(range(10))
    (again,) = a.cupy.get_simultaneous(((3 * GRANULARITY,), "uint8"))
    assert again.data.ptr == base

    a.close()
    del first, grown, again, kept
    gc.collect()
    assert driver.mapped == {} and driver.handles == set() and driver.ranges == {}
    assert driver.names().count("address_free") == 2


def test_a_failed_wake_unmaps_what_it_mapped_and_stays_asleep(cupy: Any) -> None:
    driver = RecordingDriver()
    a = Arena(source=_source(driver, cupy), framework="cupy", capture_probe=lambda: False)
    kept = a.cupy.get_persistent("kv", (4,), "int32")
    kept[...] = np.array([1, 2, 3, 4], np.int32)
    a.cupy.get_simultaneous(((GRANULARITY,), "uint8"))
    a.sleep()
    driver.fail_create = True
    with pytest.raises(MemoryError, match="stays asleep"):
        a.wake()
    assert a.is_asleep and driver.mapped == {}
    driver.fail_create = False
    a.wake()
    assert kept.get().tolist() == [1, 2, 3, 4]
    a.close()


def test_growth_past_the_reservation_maps_nothing(cupy: Any) -> None:
    driver = RecordingDriver()
    a = Arena(
        source=_source(driver, cupy, reserve=GRANULARITY),
        framework="cupy",
        capture_probe=lambda: False,
    )
    a.cupy.get_simultaneous(((16,), "uint8"))
    driver.calls.clear()
    with pytest.raises(MemoryError, match="reserved"):
        a.cupy.get_simultaneous(((2 * GRANULARITY,), "uint8"))
    assert driver.calls == []
    a.close()


# --------------------------------------------------------------------------- real GPU
@pytest.mark.gpu
def test_gpu_sleep_frees_at_least_the_slot_bytes() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    slot = 512 * MiB
    with Arena("cuda:0", source="virtual", max_bytes="4GiB", framework="torch") as a:
        (view,) = a.torch.get_simultaneous(((slot,), "uint8"))
        view.fill_(1)
        torch.cuda.synchronize()
        free_awake, _ = torch.cuda.mem_get_info()
        a.sleep()
        free_asleep, _ = torch.cuda.mem_get_info()
        assert free_asleep - free_awake >= slot
        a.wake()
        (again,) = a.torch.get_simultaneous(((slot,), "uint8"))
        assert again.data_ptr() == view.data_ptr()


@pytest.mark.gpu
def test_gpu_graph_replays_after_growth_in_place_and_after_sleep_wake() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    with Arena("cuda:0", source="virtual", max_bytes="1GiB", framework="torch") as a:
        x = a.torch.get_persistent("x", (1 << 20,), "float32")
        x.copy_(torch.arange(1 << 20, device="cuda:0", dtype=torch.float32))
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            (out,) = a.torch.get_simultaneous(((1 << 20,), "float32"))
            out.copy_(x * 2)  # warm-up
        torch.cuda.synchronize()
        a.lock(growth="in_place")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            (out,) = a.torch.get_simultaneous(((1 << 20,), "float32"))
            out.copy_(x * 2)
        graph.replay()
        torch.cuda.synchronize()
        expected = out.clone()
        with pytest.warns(Warning):
            a.torch.get_simultaneous(((64 << 20,), "uint8"))  # grows in place, locked
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected)
        start = time.perf_counter()
        a.sleep(level=1)
        a.wake()
        took = time.perf_counter() - start
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected)
        # The timing's comparison: a new capture. Its request is made once eagerly first,
        # as before any capture (the grown buffer's first torch view is an import, which
        # a capture refuses: GraphCaptureError, the first GPU run).
        start = time.perf_counter()
        a.torch.get_simultaneous(((1 << 20,), "float32"))
        again = torch.cuda.CUDAGraph()
        with torch.cuda.graph(again):
            (out2,) = a.torch.get_simultaneous(((1 << 20,), "float32"))
            out2.copy_(x * 2)
        recapture = time.perf_counter() - start
        print(f"sleep + wake {took * 1e3:.1f} ms, re-capture {recapture * 1e3:.1f} ms")


class _SplitDriver(RecordingDriver):
    """Raises KeyboardInterrupt once, on entering the ``at``-th ``cuMemUnmap``."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.seen = 0

    def unmap(self, ptr: int, size: int) -> None:
        self.seen += 1
        if self.seen == self.at:
            raise KeyboardInterrupt
        super().unmap(ptr, size)


@pytest.mark.parametrize("at", [1, 2])
def test_a_release_an_interrupt_splits_is_committed_whole_by_restore(cupy: Any, at: int) -> None:
    driver = _SplitDriver(at)
    source = _source(driver, cupy)
    block = source.reserve(GRANULARITY)
    block = source.commit(block, 3 * GRANULARITY)  # two chunks
    with pytest.raises(KeyboardInterrupt):
        source.evict(block)
    source.restore(block)  # what a failed sleep() does to go back awake
    assert sum(size for size, _ in driver.mapped.values()) == 3 * GRANULARITY
    assert {h for _, h in driver.mapped.values()} == driver.handles  # nothing leaked
    source.evict(block)
    assert driver.mapped == {} and driver.handles == set()
    source.restore(block)
    source.release(block)
    del block
    gc.collect()
    assert driver.mapped == {} and driver.handles == set() and driver.ranges == {}


class _FailingRelease(RecordingDriver):
    """``cuMemRelease`` fails once (an error, or an interrupt on entering it)."""

    def __init__(self, fault: type[BaseException]) -> None:
        super().__init__()
        self.fault: type[BaseException] | None = fault

    def release(self, handle: int) -> None:
        fault, self.fault = self.fault, None
        if fault is not None:
            raise fault("CUDA_ERROR_INVALID_VALUE (fake)")
        super().release(handle)


@pytest.mark.parametrize("fault", [ArenaError, KeyboardInterrupt])
def test_a_failed_release_in_sleep_leaks_no_physical_memory(
    cupy: Any, fault: type[BaseException]
) -> None:
    driver = _FailingRelease(fault)
    driver.fault = None
    a = Arena(source=_source(driver, cupy), framework="cupy", capture_probe=lambda: False)
    kept = a.cupy.get_persistent("kv", (4,), "int32")
    kept[...] = np.array([1, 2, 3, 4], np.int32)
    a.cupy.get_simultaneous(((2 * GRANULARITY,), "uint8"))
    driver.fault = fault
    with pytest.raises(fault):
        a.sleep(1)
    assert not a.is_asleep
    # Every handle still held is mapped: the one whose release failed was released.
    assert {h for _, h in driver.mapped.values()} == driver.handles
    assert kept.get().tolist() == [1, 2, 3, 4]
    a.sleep(1)
    assert driver.mapped == {} and driver.handles == set()
    a.wake()
    a.close()
    del kept
    gc.collect()
    assert driver.mapped == {} and driver.handles == set() and driver.ranges == {}


class _FakeLibcuda:
    """Stands in for ``ctypes.CDLL('libcuda.so.1')``: every ``cu*`` call returns
    ``status`` (0 writes a value through the first pointer argument)."""

    def __init__(self) -> None:
        self.names = {1: b"CUDA_ERROR_INVALID_VALUE", 2: b"CUDA_ERROR_OUT_OF_MEMORY"}
        self.status = 0
        self.calls: list[str] = []

    def cuGetErrorName(self, status: int, name: Any) -> int:
        name._obj.value = self.names.get(status, b"CUDA_ERROR_UNKNOWN")
        return 0

    def __getattr__(self, call: str) -> Any:
        def function(*args: Any) -> int:
            self.calls.append(call)
            if self.status == 0 and args and hasattr(args[0], "_obj"):
                target = args[0]._obj
                if isinstance(target, (ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int)):
                    target.value = 1 << 21
            return self.status

        return function


DRIVER_CALLS: list[tuple[str, str, tuple[Any, ...]]] = [
    ("retain", "cuDeviceGet", (0,)),
    ("granularity", "cuMemGetAllocationGranularity", (0,)),
    ("total_memory", "cuDeviceTotalMem", (0,)),
    ("address_reserve", "cuMemAddressReserve", (1 << 21, 1 << 21)),
    ("address_free", "cuMemAddressFree", (1 << 21, 1 << 21)),
    ("create", "cuMemCreate", (1 << 21, 0)),
    ("release", "cuMemRelease", (5,)),
    ("map", "cuMemMap", (1 << 21, 1 << 21, 5)),
    ("unmap", "cuMemUnmap", (1 << 21, 1 << 21)),
    ("set_access", "cuMemSetAccess", (1 << 21, 1 << 21, 0)),
    ("synchronize", "cuCtxSynchronize", ()),
    ("memset", "cuMemsetD8", (1 << 21, 0xA5, 16)),
    ("copy_to_host", "cuMemcpyDtoH", (1 << 22, 1 << 21, 16)),
    ("copy_to_device", "cuMemcpyHtoD", (1 << 21, 1 << 22, 16)),
]


@pytest.mark.parametrize(("method", "call", "args"), DRIVER_CALLS, ids=[c[0] for c in DRIVER_CALLS])
def test_the_ctypes_driver_maps_every_error_return(
    monkeypatch: pytest.MonkeyPatch, method: str, call: str, args: tuple[Any, ...]
) -> None:
    from arena.memory.cudadriver import CtypesDriver

    lib = _FakeLibcuda()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    driver = CtypesDriver()
    assert lib.calls == ["cuInit"]
    result = getattr(driver, method)(*args)  # status 0: no error, values read back
    if method in ("granularity", "total_memory", "address_reserve", "create"):
        assert result == 1 << 21
    lib.status = 2
    with pytest.raises(MemoryError, match=f"{call}.*CUDA_ERROR_OUT_OF_MEMORY"):
        getattr(driver, method)(*args)
    lib.status = 1
    with pytest.raises(ArenaError, match=f"{call}.*CUDA_ERROR_INVALID_VALUE \\(1\\)"):
        getattr(driver, method)(*args)


def test_the_ctypes_driver_without_libcuda_names_the_fix() -> None:
    from arena.memory.cudadriver import CtypesDriver

    with pytest.raises(ArenaError, match="needs the CUDA driver"):
        CtypesDriver("libcuda-that-does-not-exist.so.1")


def test_a_poisoned_wake_sets_every_committed_byte_of_a_cut_block(cupy: Any) -> None:
    """A step's plan cut the slot's block for the books below what a recording view
    still reads (nothing is unmapped by a cut): wake(poison=True) sets every committed
    byte, the cut-off ones too (slip: cuMemsetD8 over the block's current size only, so a
    stale view's tail read the zeros of a fresh mapping, not the sentinel)."""
    driver = RecordingDriver()
    a = Arena(source=_source(driver, cupy), framework="cupy")
    # Recorded at 3 granules, planned to 16 bytes, then another step's record and plan.
    for key, size in (("cut", 3 * GRANULARITY), ("cut", 16), ("next", 16), ("next", 16)):
        with a.step(key):
            a.cupy.get_simultaneous(((size,), "uint8"))
    assert a.stats().slots[0].capacity < 3 * GRANULARITY
    a.sleep(level=1)
    driver.calls.clear()
    a.wake(poison=True)
    memsets = [c for c in driver.calls if c[0] == "memset"]
    assert [size for _, _, size in memsets] == [3 * GRANULARITY]
    a.close()
