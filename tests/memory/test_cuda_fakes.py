"""CUDA code paths checked on the CPU with stand-in CuPy and torch modules: device
counting, the capture probe, stream-ordered release, portable pinned memory, a
torch-backed CUDA arena without CuPy, and the CuPy front's views (``tests/fakecupy.py``
over host memory, compared with NumPy's views of the same bytes). Nothing here touches a
GPU."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from arena.adapters import numpy as numpy_adapter

from arena import (
    Allocation,
    Arena,
    Device,
    DeviceUnavailableError,
    DTypeError,
    GraphCaptureError,
    SpecError,
)
from arena.base.layout import compute_layout
from arena.memory import cuda as arena_cuda
from arena.memory import deferred, devices
from tests.fakecupy import with_arrays

CUDA0 = Device("cuda", 0)


#: Every test starts and ends with no device count remembered (tests/memory/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_device_counts")


class CudaRuntimeError(RuntimeError):
    """Stands in for CuPy's CUDARuntimeError: a RuntimeError with a ``status``."""

    def __init__(self, status: int, text: str = "") -> None:
        super().__init__(f"cudaError {status}: {text}")
        self.status = status


def fake_cupy(count: int = 1, **runtime_calls: Any) -> types.ModuleType:
    """A module that passes for ``cupy`` as far as arena's CUDA code is concerned."""
    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    calls: list[tuple[Any, ...]] = []
    runtime = types.SimpleNamespace(
        CUDARuntimeError=CudaRuntimeError,
        getDeviceCount=lambda: count,
        getDevice=lambda: 0,
        streamIsCapturing=lambda ptr: 0,
        deviceSynchronize=lambda: calls.append(("deviceSynchronize",)),
        hostAllocPortable=1,
    )
    vars(runtime).update(runtime_calls)

    @contextmanager
    def device(index: int) -> Iterator[None]:
        calls.append(("device", index))
        yield

    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=runtime,
        Device=device,
        get_current_stream=lambda index=-1: types.SimpleNamespace(ptr=0),
    )
    cupy.calls = calls  # type: ignore[attr-defined]
    return cupy


def fake_torch(capturing: Any = False, stream: int = 7, count: int = 1) -> types.ModuleType:
    """A module that passes for a CUDA build of torch as far as arena's CUDA code is concerned."""
    torch = types.ModuleType("torch")
    calls: list[tuple[Any, ...]] = []

    def is_current_stream_capturing() -> bool:
        if isinstance(capturing, Exception):
            raise capturing
        return bool(capturing)

    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_initialized=lambda: True,
        is_available=lambda: count > 0,
        device_count=lambda: count,
        current_stream=lambda index=None: types.SimpleNamespace(cuda_stream=stream),
        current_device=lambda: 0,
        is_current_stream_capturing=is_current_stream_capturing,
        synchronize=lambda index=None: calls.append(("synchronize", index)),
        empty_cache=lambda: calls.append(("empty_cache",)),
    )
    torch.version = types.SimpleNamespace(cuda="12.8")  # type: ignore[attr-defined]
    torch.__version__ = "2.11.0"  # type: ignore[attr-defined]
    torch.calls = calls  # type: ignore[attr-defined]
    return torch


def install(monkeypatch: pytest.MonkeyPatch, cupy: Any = None, torch: Any = None) -> None:
    """Put the stand-ins in ``sys.modules`` (``None`` hides a framework entirely)."""
    real_find_spec = importlib.util.find_spec
    stand_ins = {"cupy": cupy, "torch": torch}

    def find_spec(name: str, *args: Any) -> Any:
        if name in stand_ins:
            module = stand_ins[name]
            return None if module is None else module.__spec__
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    # A stand-in (or hidden) CuPy hides an installed cupyx too: importing the real cupyx
    # would import the stand-in as its cupy and come back half made.
    monkeypatch.setitem(sys.modules, "cupyx", None)
    for name, module in stand_ins.items():
        if module is None:
            monkeypatch.setitem(sys.modules, name, None)  # import fails like a missing one
        else:
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            monkeypatch.setitem(sys.modules, name, module)


# ---------------------------------------------------------------- device counting
def test_counting_asks_torch_where_cupy_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=None, torch=fake_torch(count=2))
    assert devices.cuda_device_count() == 2
    assert devices.default_device() == CUDA0
    assert devices.cuda_unavailable_reason() is None


def test_counting_asks_torch_where_cupy_sees_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=fake_cupy(count=0), torch=fake_torch(count=1))
    assert devices.cuda_device_count() == 1


def test_no_device_anywhere_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=fake_cupy(count=0), torch=fake_torch(count=0))
    assert devices.default_device() == devices.CPU
    assert devices.cuda_unavailable_reason() == (
        "CuPy sees no CUDA device; torch 2.11.0 sees no CUDA device"
    )


def test_a_cuda_error_counts_no_device_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> int:
        raise CudaRuntimeError(35, "CUDA driver version is insufficient")

    install(monkeypatch, cupy=fake_cupy(getDeviceCount=no_driver), torch=None)
    assert devices.cuda_device_count() == 0
    reason = devices.cuda_unavailable_reason()
    assert reason is not None
    assert "insufficient" in reason and "torch is not installed" in reason


def test_a_warning_raised_as_an_error_is_not_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def warns() -> int:
        raise UserWarning("CUDA path could not be detected")  # what -W error makes of it

    install(monkeypatch, cupy=fake_cupy(getDeviceCount=warns), torch=None)
    with pytest.raises(UserWarning, match="CUDA path"):
        devices.cuda_device_count()


# ---------------------------------------------------------------- capture probe
def test_probe_sees_a_blocking_cupy_stream_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    def legacy_query(ptr: int) -> int:  # what CUDA answers for the legacy stream then
        raise CudaRuntimeError(906, "would make the legacy stream depend on a capturing stream")

    install(monkeypatch, cupy=fake_cupy(streamIsCapturing=legacy_query), torch=fake_torch())
    assert arena_cuda.capture_probe(CUDA0)() is True
    with pytest.raises(GraphCaptureError, match=r"growing.*cuda:0"):
        arena_cuda.check_not_capturing(CUDA0, "growing slot 0")


def test_probe_turns_torchs_capture_error_into_true(monkeypatch: pytest.MonkeyPatch) -> None:
    error = RuntimeError(
        "CUDA error: operation would make the legacy stream depend on a capturing blocking stream"
    )
    install(monkeypatch, cupy=None, torch=fake_torch(capturing=error))
    assert arena_cuda.capture_probe(CUDA0)() is True
    with pytest.raises(GraphCaptureError):
        arena_cuda.check_not_capturing(CUDA0, "allocating")


def test_probe_answers_for_the_current_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    statuses = {0: 0, 5: 1}
    cupy = fake_cupy(streamIsCapturing=statuses.__getitem__)
    install(monkeypatch, cupy=cupy, torch=fake_torch(capturing=False))
    probe = arena_cuda.capture_probe(CUDA0)
    assert probe() is False
    cupy.cuda.get_current_stream = lambda index=-1: types.SimpleNamespace(ptr=5)
    assert probe() is True
    with pytest.raises(GraphCaptureError, match="capturing"):
        arena_cuda.check_not_capturing(CUDA0, "allocating")


def test_probe_asks_torch_imported_after_it_was_made(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=fake_cupy(), torch=None)
    probe = arena_cuda.capture_probe(CUDA0)
    assert probe() is False
    monkeypatch.setitem(sys.modules, "torch", fake_torch(capturing=True))
    assert probe() is True


def test_probe_asks_the_arena_device_not_the_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = fake_cupy(count=2)
    install(monkeypatch, cupy=cupy, torch=None)
    assert arena_cuda.capture_probe(Device("cuda", 1))() is False
    assert ("device", 1) in cupy.calls  # the legacy stream is per device: device 1 made current


def test_probe_lets_other_cuda_errors_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ptr: int) -> int:
        raise CudaRuntimeError(710, "device-side assert triggered")

    install(monkeypatch, cupy=fake_cupy(streamIsCapturing=broken), torch=None)
    with pytest.raises(CudaRuntimeError, match="assert"):
        arena_cuda.capture_probe(CUDA0)()


def test_an_allocation_refused_by_a_capture_is_a_graph_capture_error() -> None:
    with pytest.raises(GraphCaptureError, match="capture"):  # noqa: SIM117
        with arena_cuda._out_of_memory_as_memory_error(CUDA0, "cudaMalloc"):
            raise CudaRuntimeError(900, "operation not permitted when stream is capturing")
    with pytest.raises(MemoryError):  # noqa: SIM117
        with arena_cuda._out_of_memory_as_memory_error(CUDA0, "cudaMalloc"):
            raise CudaRuntimeError(2, "out of memory")


# ---------------------------------------------------------------- sources
def test_pool_source_releases_in_stream_order(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = fake_cupy()
    install(monkeypatch, cupy=cupy, torch=None)
    monkeypatch.setattr(arena_cuda, "require_cuda", lambda device: cupy)
    source = arena_cuda.PoolSource(CUDA0)
    source.release(arena_cuda.Allocation(256, 256, None, CUDA0))
    assert cupy.calls == []  # no device-wide synchronisation (tests/memory/test_stream_release.py)
    assert isinstance(source.stream_events(), deferred.CupyEvents)


def test_torch_source_releases_in_stream_order(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = fake_torch()
    install(monkeypatch, cupy=None, torch=torch)
    source = arena_cuda.TorchSource(CUDA0)
    source.release(arena_cuda.Allocation(256, 256, None, CUDA0))
    assert torch.calls == []
    assert isinstance(source.stream_events(), deferred.TorchEvents)


def test_pinned_memory_is_portable(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = fake_cupy()
    flags_seen: list[int] = []

    class Pointer(bytearray):
        ptr = 4096

    def pinned_memory(nbytes: int, flags: int = 0) -> int:
        flags_seen.append(flags)
        return nbytes

    cupy.cuda.PinnedMemory = pinned_memory
    cupy.cuda.PinnedMemoryPointer = lambda nbytes, offset: Pointer(nbytes)
    monkeypatch.setattr(arena_cuda, "require_cuda", lambda device: cupy)
    allocation = arena_cuda.PinnedSource().allocate(64)
    assert allocation.nbytes == 64 and allocation.ptr == 4096
    assert flags_seen == [cupy.cuda.runtime.hostAllocPortable]


# ---------------------------------------------------------------- the CuPy front's views
class HostMemoryAsCuda:
    """A ``cuda:0`` memory source that hands out page-aligned host blocks, owned by
    stand-in CuPy arrays (as the CuPy sources do) or by plain NumPy arrays (an owner the
    adapter wraps with ``UnownedMemory``, as it does torch's)."""

    def __init__(self, cupy: Any, cupy_owner: bool) -> None:
        self.cupy = cupy
        self.cupy_owner = cupy_owner
        self.live: dict[int, np.ndarray] = {}

    @property
    def device(self) -> Device:
        return CUDA0

    def allocate(self, nbytes: int) -> Allocation:
        raw = np.zeros(nbytes + 4096, np.uint8)
        start = -raw.ctypes.data % 4096
        block = raw[start : start + nbytes]
        owner: Any = block
        if self.cupy_owner:
            memory = self.cupy.cuda.UnownedMemory(block.ctypes.data, nbytes, block, 0)
            pointer = self.cupy.cuda.MemoryPointer(memory, 0)
            owner = self.cupy.ndarray((nbytes,), self.cupy.uint8, pointer)
        self.live[block.ctypes.data] = block
        return Allocation(block.ctypes.data, nbytes, owner, CUDA0)

    def release(self, allocation: Allocation) -> None:
        del self.live[allocation.ptr]

    def block(self) -> np.ndarray:
        (block,) = self.live.values()
        return block


#: Requests the comparison walks: several dtypes (bool, 8- to 64-bit, ml_dtypes' bfloat16),
#: 0-d, zero-size and 3-D views; the second has the first's structure with new sizes (a
#: plan builds it), the third a new structure.
CUPY_REQUESTS = [
    (((4, 8), "float32"), ((5,), "int64"), ((), "float16"), ((2, 3, 4), "bool")),
    (((16, 2), "float32"), ((1,), "int64"), ((), "float16"), ((0, 3, 4), "bool")),
    (((7,), "uint8"), ((3, 3), "bfloat16"), ((2, 2, 2), "complex64"), ((9,), "int16")),
]


def _load_cupy_front(monkeypatch: pytest.MonkeyPatch, cupy: Any) -> None:
    """Import ``arena.adapters.cupy`` against ``cupy`` for this test only: the module and
    the package attribute are put back afterwards, so no later test sees the stand-in."""
    import arena.adapters

    install(monkeypatch, cupy=cupy, torch=None)
    # setitem, not delitem: monkeypatch puts back only a key it saw, and an absent key must
    # be absent again afterwards (the module imported against the stand-in would otherwise
    # stay cached for later tests that use the real CuPy).
    monkeypatch.setitem(sys.modules, "arena.adapters.cupy", None)
    del sys.modules["arena.adapters.cupy"]
    monkeypatch.setattr(arena.adapters, "cupy", None, raising=False)


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("cupy_owner", [True, False], ids=["cupy owner", "other owner"])
def test_cupy_views_are_numpys_views_of_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, cupy_owner: bool, cached: bool
) -> None:
    pytest.importorskip("ml_dtypes")
    cupy = with_arrays(fake_cupy())
    _load_cupy_front(monkeypatch, cupy)
    source = HostMemoryAsCuda(cupy, cupy_owner)
    with Arena(source=source, framework="cupy", capture_probe=lambda: False) as a:
        front = a.front("cupy", cached=cached)
        (nothing,) = front.get_simultaneous(((0, 3), "float32"))  # before any memory
        assert nothing.shape == (0, 3) and nothing.strides == (12, 4) and not source.live
        for specs in CUPY_REQUESTS * 2:  # new: general path or plan; again: a hit
            views = front.get_simultaneous(*specs)
            twins = numpy_adapter.ADAPTER.typed_views(source.block(), compute_layout(specs))
            for k, (view, twin) in enumerate(zip(views, twins, strict=True)):
                assert isinstance(view, cupy.ndarray)
                assert front.data_ptr(view) == numpy_adapter.ADAPTER.data_ptr(twin), (specs, k)
                assert view.data.ptr == twin.__array_interface__["data"][0]
                assert view.shape == twin.shape and view.strides == twin.strides
                assert view.dtype == twin.dtype
                twin[...] = np.arange(twin.size).reshape(twin.shape).astype(twin.dtype)
            for view, twin in zip(views, twins, strict=True):  # all written, then read
                assert np.array_equal(view.get(), twin)
        (empty,) = front.get_simultaneous(((0,), "float32"))
        assert empty.shape == (0,) and empty.dtype == np.float32


def test_cupy_write_into_fills_the_bytes_numpy_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = with_arrays(fake_cupy())
    _load_cupy_front(monkeypatch, cupy)
    source = HostMemoryAsCuda(cupy, cupy_owner=True)
    with Arena(source=source, framework="cupy", capture_probe=lambda: False) as a:
        specs = (((3,), "int32"), ((2, 3), "float32"))
        ints, floats = a.cupy.get_simultaneous(*specs)
        assert a.cupy.write_into(floats, np.ones((2, 3), np.float32) * 2) is floats
        a.cupy.write_into(ints, cupy.asarray(np.array([7, 8, 9], np.int32)))
        _, host = numpy_adapter.ADAPTER.typed_views(source.block(), compute_layout(specs))
        assert host.tolist() == [[2.0] * 3] * 2
        assert ints.get().tolist() == [7, 8, 9]
        with pytest.raises(DTypeError, match=r"float64.*float32"):
            a.cupy.write_into(floats, np.ones((2, 3)))
        with pytest.raises(SpecError, match=r"shape \(3,\).*\(2, 3\)"):
            a.cupy.write_into(floats, np.ones(3, np.float32))


def test_a_missing_ordinal_is_refused_with_the_count_and_the_ordinals_that_exist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena.memory.cuda import refuse_missing_ordinal

    monkeypatch.setattr(arena_cuda, "cuda_device_count", lambda: 2)
    refuse_missing_ordinal(Device("cuda", 1), 2, "is not available: CuPy sees")  # exists
    with pytest.raises(DeviceUnavailableError) as caught:
        refuse_missing_ordinal(Device("cuda", 2), 2, "is not available to torch: torch sees")
    assert str(caught.value) == (
        "cuda:2 is not available to torch: torch sees 2 CUDA device(s); use device='cpu' "
        "for a host arena or an ordinal below 2"
    )
    monkeypatch.setattr(arena_cuda, "cuda_device_count", lambda: 0)
    monkeypatch.setattr(arena_cuda, "cuda_unavailable_reason", lambda: "no driver")
    with pytest.raises(DeviceUnavailableError) as caught:
        refuse_missing_ordinal(Device("cuda", 0), 0, "is not available: CuPy sees")
    assert str(caught.value) == (
        "cuda:0 is not available: CuPy sees 0 CUDA device(s) (no driver); use device='cpu' "
        "for a host arena"
    )
