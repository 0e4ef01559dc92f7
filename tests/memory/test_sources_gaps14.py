"""Round 14d (issue 26 item 12): tests that kill mutants the suite let through in the
memory sources.

``arena/memory/virtual.py`` (a failed system call's errno and words, the reservation
halved where the address space is short), ``arena/memory/devices.py`` (a negative
ordinal's words, ``"gpu"``, one device counted), ``arena/memory/cuda.py`` (torch's
refusal, pinned memory's owner and its refusal without a GPU), ``arena/memory/rmm.py``
(the array interface's version), ``arena/memory/cudavm.py`` (the default wrap's device,
the default reservation, the block's owner) and ``arena/memory/cudadriver.py`` (each
argument of the ctypes calls no test recorded, the errors' call names), on the stand-ins
of ``tests/memory/test_cuda_fakes.py`` and ``test_virtual_cuda.py``: no GPU needed.
"""

from __future__ import annotations

import ctypes
import errno
from typing import Any

import numpy as np
import pytest

from arena import ArenaError, Device, DeviceError, DeviceUnavailableError
from arena.memory import cuda as arena_cuda
from arena.memory import cudavm, devices
from arena.memory.devices import CPU, parse_device
from arena.memory.rmm import RmmSource
from arena.memory.virtual import PAGE, VirtualHostSource
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import fake_cupy, fake_torch, install
from tests.memory.test_cudavm_gaps12 import _ArgumentsLibcuda, _FakeBindings
from tests.memory.test_sources_gaps13 import _pinned_cupy
from tests.memory.test_stream_release import HostResource
from tests.memory.test_virtual_cuda import GRANULARITY, RecordingDriver, RecordingEvents

CUDA1 = Device("cuda", 1)


#: Every test starts and ends with no device count remembered (tests/memory/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_device_counts")


# ---------------------------------------------------------------- virtual host memory
def test_a_failed_system_call_raises_its_errno_and_names_the_call() -> None:
    # madvise(MADV_DONTNEED) refuses locked pages (EINVAL): evicting a block one of
    # whose pages was mlock()ed fails in the kernel, and the error must carry its errno.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = libc.munlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    source = VirtualHostSource()
    block = source.allocate(PAGE)
    if libc.mlock(block.ptr, PAGE) != 0:
        pytest.skip(f"mlock refused here: {ctypes.get_errno()}")
    try:
        # ctypes' own copy of errno cleared: a call made without use_errno would read it
        # (what a call before left there could be EINVAL too).
        ctypes.set_errno(0)
        with pytest.raises(OSError) as caught:
            source.evict(block)
    finally:
        libc.munlock(block.ptr, PAGE)
    assert not isinstance(caught.value, MemoryError)
    assert caught.value.errno == errno.EINVAL
    assert caught.value.strerror == f"madvise({block.ptr:#x}, {PAGE}, 4) failed: Invalid argument"
    source.evict(block)  # unlocked: the pages go back
    source.release(block)


def test_a_reservation_past_the_address_space_is_halved_until_one_fits() -> None:
    # 2**62 bytes is past any x86-64 or arm64 user address space: mmap refuses, and the
    # reservation is halved until one fits, never below the request.
    source = VirtualHostSource(reserve=1 << 62)
    block = source.reserve(3 * PAGE)
    reserved = source.reserved(block)
    assert 3 * PAGE <= reserved < 1 << 62
    assert reserved & (reserved - 1) == 0  # halved from a power of two
    block.owner[-1] = 1  # committed to its last byte
    source.release(block)


# ---------------------------------------------------------------- devices
def test_a_negative_ordinal_is_refused_naming_what_was_given() -> None:
    with pytest.raises(DeviceError) as caught:
        parse_device(-1)
    assert str(caught.value) == "CUDA device ordinal must be >= 0, got -1; use e.g. 0"
    cupy_device = type("Device", (), {"__module__": "cupy.cuda.device", "id": -2})()
    with pytest.raises(DeviceError) as caught:
        parse_device(cupy_device)
    assert str(caught.value) == (
        f"CUDA device ordinal must be >= 0, got {cupy_device!r}; use e.g. 0"
    )


def test_gpu_alone_is_cuda_device_0() -> None:
    assert parse_device("gpu") == Device("cuda", 0)
    assert parse_device(" GPU ") == Device("cuda", 0)


def test_one_cuda_device_counted_leaves_no_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=fake_cupy(count=1), torch=None)
    assert devices.cuda_device_count() == 1
    assert devices.cuda_unavailable_reason() is None


# ---------------------------------------------------------------- cuda.py
def test_a_cuda_ordinal_torch_does_not_see_is_refused_naming_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, cupy=None, torch=fake_torch(count=1))
    with pytest.raises(DeviceUnavailableError) as caught:
        arena_cuda.require_torch_cuda(CUDA1)
    assert str(caught.value) == (
        "cuda:1 is not available to torch: torch sees 1 CUDA device(s); use device='cpu' for "
        "a host arena or an ordinal below 1"
    )


def test_a_pinned_block_is_owned_by_a_byte_array_over_its_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _pinned_cupy(monkeypatch)
    allocation = arena_cuda.PinnedSource(1).allocate(64)
    owner = allocation.owner
    assert isinstance(owner, np.ndarray) and owner.dtype == np.uint8 and owner.shape == (64,)
    owner[...] = 7  # the pinned bytes, writable from the host


def test_pinned_memory_without_any_cuda_device_says_it_needs_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, cupy=fake_cupy(count=0), torch=None)
    with pytest.raises(DeviceUnavailableError) as caught:
        arena_cuda.PinnedSource(0)
    assert str(caught.value) == (
        "source='pinned' (page-locked host memory, for fast copies to and from a GPU) needs "
        "CUDA, and no CUDA device is visible here (CuPy sees no CUDA device; torch is not "
        "installed); without a GPU "
        "use the default host source (Arena('cpu'), source='host')"
    )


# ---------------------------------------------------------------- rmm.py
def test_a_host_rmm_block_describes_itself_with_version_3_of_the_array_interface() -> None:
    allocation = RmmSource(HostResource(), CPU).allocate(64)
    interface = allocation.owner.base.__array_interface__
    assert interface == {
        "shape": (64,),
        "typestr": "|u1",
        "data": (allocation.ptr, False),
        "version": 3,
        "strides": None,
    }


# ---------------------------------------------------------------- cudavm.py
def _cupy_seeing(monkeypatch: pytest.MonkeyPatch, count: int) -> Any:
    cupy = with_arrays(fake_cupy(count=count))
    install(monkeypatch, cupy=cupy, torch=None)
    return cupy


def test_the_default_wrap_puts_a_cupy_array_on_the_ranges_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cupy_seeing(monkeypatch, count=2)
    memory = np.zeros(GRANULARITY, np.uint8)  # host bytes stand in for the device's
    base = memory.ctypes.data
    array = cudavm._wrap_device_memory(base, GRANULARITY, memory, CUDA1)
    assert array.data.device_id == 1 and array.data.ptr == base


def test_the_default_wrap_leaves_a_device_cupy_does_not_see_to_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = with_arrays(fake_cupy(count=1))  # sees cuda:0 only
    torch = fake_torch(count=2)
    made: list[tuple[Any, Any]] = []

    def as_tensor(data: Any, device: Any) -> str:
        made.append((data, device))
        return "tensor"

    torch.as_tensor = as_tensor  # type: ignore[attr-defined]
    install(monkeypatch, cupy=cupy, torch=torch)
    keeper = object()
    assert cudavm._wrap_device_memory(0x10000, 4096, keeper, CUDA1) == "tensor"
    ((interface, device),) = made
    assert device == "cuda:1" and interface.keeper is keeper
    assert interface.__cuda_array_interface__["data"] == (0x10000, False)


def test_a_source_without_a_reserve_reserves_the_devices_memory() -> None:
    driver = RecordingDriver()
    source = cudavm.VirtualCudaSource(
        Device("cuda", 0), driver=driver, wrap=lambda *a: None, events=RecordingEvents(driver)
    )
    assert source.reserve_bytes == driver.total_memory(0)


def test_a_reserved_block_is_owned_by_what_the_wrap_made_over_its_range() -> None:
    driver = RecordingDriver()
    made: list[Any] = []

    def wrap(ptr: int, nbytes: int, keeper: Any, device: Device) -> Any:
        made.append((ptr, nbytes, keeper, device))
        return made[-1]

    source = cudavm.VirtualCudaSource(
        Device("cuda", 0),
        reserve=4 * GRANULARITY,
        driver=driver,
        wrap=wrap,
        events=RecordingEvents(driver),
    )
    block = source.reserve(100)
    assert block.owner is made[-1]
    assert block.owner[:2] == (block.ptr, 100) and block.owner[3] == Device("cuda", 0)


# ---------------------------------------------------------------- cudadriver.py
class _ObjectsLibcuda(_ArgumentsLibcuda):
    """Also keeps each call's raw arguments (the structures passed by reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, call: str) -> Any:
        inner = super().__getattr__(call)

        def function(*args: Any) -> int:
            self.raw.append((call, args))
            return int(inner(*args))

        return function


def test_the_ctypes_driver_passes_the_arguments_of_its_other_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena.memory.cudadriver import CtypesDriver

    lib = _ObjectsLibcuda()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    driver = CtypesDriver()
    driver.retain(3)
    assert driver.granularity(2) == 1 << 21
    driver.set_access(1 << 23, 1 << 21, 2)
    driver.copy_to_host(1 << 24, 1 << 23, 16)
    assert lib.arguments[1:] == [
        # (device handle out, ordinal), then (context out, the handle)
        ("cuDeviceGet", ["&", 3]),
        ("cuDevicePrimaryCtxRetain", ["&", 1 << 21]),
        # (size out, the allocation's properties, CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        ("cuMemGetAllocationGranularity", ["&", "&", 0]),
        # (address, size, one access descriptor, count 1)
        ("cuMemSetAccess", [1 << 23, 1 << 21, "&", 1]),
        # (host destination, device source, bytes)
        ("cuMemcpyDtoH_v2", [1 << 24, 1 << 23, 16]),
    ]
    prop = dict(lib.raw)["cuMemGetAllocationGranularity"][1]._obj
    assert (prop.location.type, prop.location.id) == (1, 2)  # CU_MEM_LOCATION_TYPE_DEVICE
    desc = dict(lib.raw)["cuMemSetAccess"][2]._obj
    assert (desc.location.type, desc.location.id) == (1, 2)


def test_a_failed_context_switch_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.memory.cudadriver import CtypesDriver

    lib = _ArgumentsLibcuda()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    driver = CtypesDriver()
    lib.status = 1
    with pytest.raises(ArenaError, match=r"^cuCtxSetCurrent failed: CUDA_ERROR_INVALID_VALUE"):
        driver.push(ctypes.c_void_p(5))


def test_the_bindings_drivers_device_calls_are_named_in_their_errors() -> None:
    from arena.memory.cudadriver import BindingsDriver

    fake = _FakeBindings()
    driver = BindingsDriver(fake)
    assert driver.total_memory(0) == 1 << 21
    fake.status = 1
    with pytest.raises(ArenaError, match=r"^cuDeviceGet failed: 1$"):
        driver.retain(0)
    with pytest.raises(ArenaError, match=r"^cuDeviceTotalMem failed: 1$"):
        driver.total_memory(0)
