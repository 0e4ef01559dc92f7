"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/memory/cudavm.py``, against the recording fake of the driver and the CuPy stand-in
of tests/memory/test_virtual_cuda.py (no GPU)."""

from __future__ import annotations

import ctypes
import gc
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from arena import ArenaError
from arena.memory import cudavm
from arena.memory.devices import Device
from tests.memory.test_virtual_cuda import (
    GRANULARITY,
    MiB,
    RecordingDriver,
    _FakeLibcuda,
    _source,
    cupy,  # noqa: F401  (the fixture)
)


class _AskedDriver(RecordingDriver):
    """Records the device each granularity was asked for; ``fail_access_at`` makes that
    set_access call (counted from 1) fail."""

    def __init__(self, fail_access_at: int = 0) -> None:
        super().__init__()
        self.granularity_asked: list[Any] = []
        self.fail_access_at = fail_access_at
        self.accesses = 0

    def granularity(self, device: int) -> int:
        self.granularity_asked.append(device)
        return GRANULARITY

    def set_access(self, ptr: int, size: int, device: int) -> None:
        self.accesses += 1
        if self.accesses == self.fail_access_at:
            raise MemoryError("set_access refused (fake)")
        super().set_access(ptr, size, device)


def test_the_granularity_is_asked_of_the_sources_device(cupy: Any) -> None:  # noqa: F811
    driver = _AskedDriver()
    _source(driver, cupy)
    assert driver.granularity_asked == [0]


def test_a_closed_range_frees_exactly_the_addresses_it_reserved(cupy: Any) -> None:  # noqa: F811
    driver = _AskedDriver()
    source = _source(driver, cupy, reserve=4 * MiB)
    block = source.reserve(GRANULARITY)
    base = block.ptr
    source.release(block)
    del block
    gc.collect()
    assert ("reserve", base, 4 * MiB) in driver.calls
    assert driver.calls[-1] == ("address_free", base, 4 * MiB)


def test_a_growth_whose_access_fails_unmaps_its_own_chunk_and_keeps_the_first(
    cupy: Any,  # noqa: F811
) -> None:
    driver = _AskedDriver(fail_access_at=2)  # the first growth's chunk
    source = _source(driver, cupy, reserve=4 * MiB)
    block = source.reserve(GRANULARITY)
    with pytest.raises(MemoryError, match="set_access refused"):
        source.commit(block, 3 * GRANULARITY)
    unmapped = [c for c in driver.calls if c[0] == "unmap"]
    assert unmapped == [("unmap", block.ptr + GRANULARITY, 2 * GRANULARITY)]
    assert list(driver.mapped) == [block.ptr]  # the first chunk stays, mapped


def test_the_torch_interface_describes_the_range_as_bytes() -> None:
    keeper = object()
    interface = cudavm._Interface(0x1000, 4096, keeper)
    assert interface.keeper is keeper
    assert interface.__cuda_array_interface__ == {
        "shape": (4096,),
        "typestr": "|u1",
        "data": (0x1000, False),
        "version": 3,
        "strides": None,
    }


def test_the_default_wrap_puts_a_cupy_array_at_the_ranges_address(
    cupy: Any,  # noqa: F811
) -> None:
    driver = RecordingDriver()
    driver.push(("primary", 0))
    base = driver.address_reserve(GRANULARITY, GRANULARITY)
    keeper = object()
    array = cudavm._wrap_device_memory(base, GRANULARITY, keeper, Device("cuda", 0))
    assert int(array.data.ptr) == base and array.nbytes == GRANULARITY


class _ArgumentsLibcuda(_FakeLibcuda):
    """:class:`_FakeLibcuda` that also records each call's arguments as plain values: a
    ctypes scalar as its value, a pointer (``byref``) as ``"&"``."""

    def __init__(self) -> None:
        super().__init__()
        self.arguments: list[tuple[str, list[Any]]] = []

    def __getattr__(self, call: str) -> Any:
        inner = super().__getattr__(call)

        def function(*args: Any) -> int:
            plain = ["&" if hasattr(a, "_obj") else getattr(a, "value", a) for a in args]
            self.arguments.append((call, plain))
            return int(inner(*args))

        return function


def test_the_ctypes_driver_passes_each_argument_the_driver_api_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena.memory.cudadriver import CtypesDriver

    lib = _ArgumentsLibcuda()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    driver = CtypesDriver()
    assert driver.address_reserve(1 << 21, 1 << 22) == 1 << 21
    assert driver.create(1 << 21, 0) == 1 << 21
    driver.map(1 << 23, 1 << 21, 5)
    assert lib.arguments == [
        ("cuInit", [0]),
        # (pointer out, size, alignment, fixed address 0: anywhere, flags 0)
        ("cuMemAddressReserve", ["&", 1 << 21, 1 << 22, 0, 0]),
        # (handle out, size, the allocation's properties, flags 0)
        ("cuMemCreate", ["&", 1 << 21, "&", 0]),
        # (address, size, offset into the handle 0, handle, flags 0)
        ("cuMemMap", [1 << 23, 1 << 21, 0, 5, 0]),
    ]


def test_a_failed_cu_init_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.memory.cudadriver import CtypesDriver

    lib = _FakeLibcuda()
    lib.status = 1
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    with pytest.raises(ArenaError, match=r"^cuInit failed: CUDA_ERROR_INVALID_VALUE \(1\)$"):
        CtypesDriver()


class _FakeBindings:
    """Stands in for NVIDIA's ``cuda.bindings.driver``: every ``cu*`` call is recorded with
    its arguments and returns ``(status, 1 << 21)``, as the bindings return a status and
    the values the C call writes."""

    CUmemAllocationType = SimpleNamespace(CU_MEM_ALLOCATION_TYPE_PINNED=1)
    CUmemLocationType = SimpleNamespace(CU_MEM_LOCATION_TYPE_DEVICE=1)
    CUmemAllocationGranularity_flags = SimpleNamespace(CU_MEM_ALLOC_GRANULARITY_MINIMUM=0)
    CUmemAccess_flags = SimpleNamespace(CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.status = 0

    @staticmethod
    def CUmemAllocationProp() -> Any:
        return SimpleNamespace(location=SimpleNamespace())

    @staticmethod
    def CUmemAccessDesc() -> Any:
        return SimpleNamespace(location=SimpleNamespace())

    def __getattr__(self, call: str) -> Any:
        def function(*args: Any) -> tuple[int, ...]:
            self.calls.append((call, args))
            return (self.status, 1 << 21) if self.status == 0 else (self.status,)

        return function


def test_the_bindings_driver_is_loaded_where_installed_and_passes_each_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena.memory.cudadriver import BindingsDriver, load_driver

    fake = _FakeBindings()
    package, bindings = ModuleType("cuda"), ModuleType("cuda.bindings")
    bindings.driver = fake  # type: ignore[attr-defined]
    package.bindings = bindings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", package)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)
    driver = load_driver()
    assert isinstance(driver, BindingsDriver)
    assert driver.address_reserve(1 << 21, 1 << 22) == 1 << 21
    assert driver.create(1 << 21, 0) == 1 << 21
    driver.map(1 << 23, 1 << 21, 5)
    driver.unmap(1 << 23, 1 << 21)
    calls = [(name, args) for name, args in fake.calls if name != "cuMemCreate"]
    assert calls == [
        ("cuInit", (0,)),
        ("cuMemAddressReserve", (1 << 21, 1 << 22, 0, 0)),
        ("cuMemMap", (1 << 23, 1 << 21, 0, 5, 0)),
        ("cuMemUnmap", (1 << 23, 1 << 21)),
    ]
    (create,) = [args for name, args in fake.calls if name == "cuMemCreate"]
    assert create[0] == 1 << 21 and create[1].location.id == 0 and create[2:] == (0,)
    fake.status = 1
    with pytest.raises(ArenaError, match=r"^cuMemAddressReserve failed: 1$"):
        driver.address_reserve(1 << 21, 1 << 22)
    fake.status = 2  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(MemoryError, match=r"^cuMemCreate failed: 2$"):
        driver.create(1 << 21, 0)
