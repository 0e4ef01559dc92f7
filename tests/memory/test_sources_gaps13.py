"""Round 13a (issue 26 item 12): tests that kill mutants the suite let through.

``arena/memory/devices.py`` (device strings, CuPy and torch device objects, counting
without importing torch), ``arena/memory/capture.py`` (the probe's device switch for
the default streams only, the CuPy left out where it does not see the device, torch's
device, the refusal's words) and ``arena/memory/cuda.py`` (the CuPy sources' and the
torch source's allocations, on the stand-in CuPy and torch of
``tests/memory/test_cuda_fakes.py``: nothing here touches a GPU), and
``arena/memory/rmm.py`` (the refusal's words, a CUDA resource without CuPy, a forked
child's lock).
"""

from __future__ import annotations

import gc
import os
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pytest

from arena import (
    ArenaOutOfMemoryError,
    ConfigError,
    Device,
    DeviceError,
    DeviceUnavailableError,
    GraphCaptureError,
)
from arena.memory import capture, devices
from arena.memory import cuda as arena_cuda
from arena.memory.devices import CPU, parse_device
from arena.memory.rmm import RmmSource
from tests import fakecupy
from tests.memory.test_cuda_fakes import CudaRuntimeError, fake_cupy, fake_torch, install
from tests.memory.test_stream_release import HostResource, Returning

CUDA0 = Device("cuda", 0)
CUDA1 = Device("cuda", 1)


#: Every test starts and ends with no device count remembered (tests/memory/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_device_counts")


# ---------------------------------------------------------------- devices
def test_devices_print_as_they_are_spelt() -> None:
    assert str(CPU) == "cpu"
    assert str(Device("cuda", 2)) == "cuda:2"


def test_ordinals_and_strings_parse_to_their_cuda_device() -> None:
    assert parse_device(3) == Device("cuda", 3)
    assert parse_device("cuda:2") == Device("cuda", 2)
    assert parse_device("GPU:4") == Device("cuda", 4)
    assert parse_device("cuda") == CUDA0


def test_the_hosts_ordinal_0_is_the_host_and_no_other_ordinal_is() -> None:
    assert parse_device("cpu:0") == CPU
    assert parse_device("host:0") == CPU
    with pytest.raises(DeviceError) as caught:
        parse_device("cpu:1")
    assert str(caught.value) == "the host is one device, got 'cpu:1'; use 'cpu' (or 'cpu:0')"


def test_a_cupy_device_is_read_through_its_id_and_nothing_else_is() -> None:
    cupy_device = type("Device", (), {"__module__": "cupy.cuda.device", "id": 2})()
    assert parse_device(cupy_device) == Device("cuda", 2)
    # An ``id`` alone does not make a CuPy device.
    other = type("Handle", (), {"__module__": "mylib", "id": 1})()
    with pytest.raises(DeviceError, match="cannot understand device"):
        parse_device(other)


def test_only_torchs_device_class_is_read_through_str() -> None:
    class device:  # the name of torch's class
        def __str__(self) -> str:
            return "cuda:1"

    with pytest.raises(DeviceError, match=r"cannot understand device .*\(device\)"):
        parse_device(device())


def test_counting_never_imports_torch_where_cupy_is_installed_and_sees_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, cupy=fake_cupy(count=0), torch=fake_torch(count=1))
    monkeypatch.delitem(sys.modules, "torch")  # installed, not imported
    assert devices.cuda_device_count() == 0
    assert devices.cuda_unavailable_reason() == "CuPy sees no CUDA device"
    assert "torch" not in sys.modules


def test_no_reason_from_any_framework_says_none_was_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def counts_nothing() -> int:  # a count that leaves no reason
        return 0

    monkeypatch.setattr(devices, "cupy_device_count", counts_nothing)
    monkeypatch.setattr(devices, "torch_device_count", counts_nothing)
    assert devices.cuda_unavailable_reason() == (
        "no framework that can count CUDA devices was asked"
    )


# ---------------------------------------------------------------- capture probe
def _recording_cupy(count: int, current: int, status: int) -> tuple[Any, list[Any]]:
    """A stand-in CuPy whose current stream has handle ``current`` and whose queries
    answer ``status``, recording each handle asked about."""
    asked: list[Any] = []

    def stream_is_capturing(handle: Any) -> int:
        asked.append(handle)
        return status

    cupy = fake_cupy(count=count, streamIsCapturing=stream_is_capturing)
    cupy.cuda.get_current_stream = lambda index=-1: types.SimpleNamespace(ptr=current)
    return cupy, asked


@pytest.mark.parametrize("handle", [0, 1, 2])
def test_a_default_stream_is_asked_about_with_the_arenas_device_current(
    monkeypatch: pytest.MonkeyPatch, handle: int
) -> None:
    cupy, asked = _recording_cupy(count=2, current=handle, status=1)
    install(monkeypatch, cupy=cupy, torch=None)
    assert capture.capture_probe(CUDA1)() is True  # the device current is 0
    assert asked == [handle]
    assert cupy.calls == [("device", 1)]


def test_a_stream_of_its_own_is_asked_about_without_a_device_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy, asked = _recording_cupy(count=2, current=0x7F00, status=0)
    install(monkeypatch, cupy=cupy, torch=None)
    assert capture.capture_probe(CUDA1)() is False
    assert asked == [0x7F00]
    assert cupy.calls == []  # the probe runs at every request: no needless switch


def test_a_cupy_that_does_not_see_the_device_is_never_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy, asked = _recording_cupy(count=1, current=0, status=1)
    install(monkeypatch, cupy=cupy, torch=None)
    assert capture.capture_probe(CUDA1)() is False  # CuPy sees cuda:0 only
    assert asked == [] and cupy.calls == []


def test_torch_is_asked_on_the_arenas_device(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = fake_torch(capturing=True)
    entered: list[Any] = []

    @contextmanager
    def device(index: Any) -> Iterator[None]:
        entered.append(index)
        yield

    torch.cuda.device = device
    install(monkeypatch, cupy=None, torch=torch)
    assert capture.capture_probe(CUDA1)() is True  # torch's current device is 0
    assert entered == [1]


def test_torch_on_the_legacy_stream_is_asked_where_cupy_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch's current stream may be the legacy default stream (handle 1, as an
    # ExternalStream): with no CuPy answer to skip, torch is asked.
    install(monkeypatch, cupy=None, torch=fake_torch(capturing=True, stream=1))
    assert capture.capture_probe(CUDA0)() is True


def test_the_refusal_names_what_was_asked_the_device_and_the_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy, _ = _recording_cupy(count=1, current=0x7F00, status=1)
    install(monkeypatch, cupy=cupy, torch=None)
    with pytest.raises(GraphCaptureError) as caught:
        capture.check_not_capturing(CUDA0, "growing slot 0")
    assert str(caught.value) == (
        "growing slot 0 on cuda:0 was requested while a stream is capturing a CUDA graph; "
        "memory work now would corrupt the capture. Run the same step once eagerly "
        "(warm-up) before capturing, or reserve() the size before capture"
    )


class _StatusError(Exception):
    """An error that carries a CUDA status and is no RuntimeError."""

    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


def test_a_status_decides_a_capture_error_and_text_decides_only_without_one() -> None:
    assert capture.is_capture_error(_StatusError(903)) is True
    assert capture.is_capture_error(_StatusError(2)) is False
    assert capture.is_capture_error(CudaRuntimeError(2, "out of memory while capturing")) is False
    assert capture.is_capture_error(RuntimeError("CUDA error: device-side assert")) is False
    assert capture.is_capture_error(RuntimeError("operation failed during capture")) is True
    assert capture.is_capture_error(ValueError("capture")) is False


# ---------------------------------------------------------------- the CuPy sources
class _Blocks:
    """Host blocks standing in for device memory, kept alive for the test."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []

    def memory(self, nbytes: int, device_id: int = 1) -> fakecupy.UnownedMemory:
        block = np.zeros(nbytes, np.uint8)
        self.kept.append(block)
        return fakecupy.UnownedMemory(block.ctypes.data, nbytes, block, device_id)


def _cupy_with_memory(monkeypatch: pytest.MonkeyPatch, **runtime: Any) -> tuple[Any, _Blocks]:
    cupy = fakecupy.with_arrays(fake_cupy(count=2, **runtime))
    blocks = _Blocks()
    cupy.cuda.Memory = blocks.memory
    cupy.cuda.alloc = lambda nbytes: fakecupy.MemoryPointer(blocks.memory(nbytes), 0)
    install(monkeypatch, cupy=cupy, torch=None)
    return cupy, blocks


def _check_cupy_block(allocation: Any, blocks: _Blocks, nbytes: int) -> None:
    assert allocation.ptr == blocks.kept[-1].ctypes.data
    assert allocation.nbytes == nbytes and allocation.device == CUDA1
    assert isinstance(allocation.owner, fakecupy.ndarray)
    assert allocation.owner.shape == (nbytes,) and allocation.owner.dtype == np.uint8
    assert allocation.owner.data.ptr == allocation.ptr


def test_the_device_source_mallocs_on_its_device_a_cupy_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy, blocks = _cupy_with_memory(monkeypatch)
    assert arena_cuda.require_cuda(CUDA1) is cupy
    source = arena_cuda.DeviceSource(CUDA1)
    _check_cupy_block(source.allocate(512), blocks, 512)
    assert cupy.calls == [("device", 1)]


def test_the_pool_source_allocates_on_its_device_a_cupy_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy, blocks = _cupy_with_memory(monkeypatch)
    source = arena_cuda.PoolSource(CUDA1)
    _check_cupy_block(source.allocate(768), blocks, 768)
    assert cupy.calls == [("device", 1)]


@pytest.mark.parametrize(
    ("kind", "what"), [("device", "cudaMalloc"), ("pool", "allocation")], ids=["device", "pool"]
)
def test_a_cupy_allocation_a_capture_refuses_names_the_call_and_the_device(
    monkeypatch: pytest.MonkeyPatch, kind: str, what: str
) -> None:
    cupy, _ = _cupy_with_memory(monkeypatch)

    def refused(nbytes: int) -> Any:
        raise CudaRuntimeError(906, "operation would make the legacy stream depend on a capture")

    cupy.cuda.Memory = cupy.cuda.alloc = refused
    source = arena_cuda.cuda_source(CUDA1, kind)
    with pytest.raises(GraphCaptureError) as caught:
        source.allocate(256)
    assert str(caught.value).startswith(
        f"{what} on cuda:1 was requested while a CUDA graph capture refused it"
    )


class _Tensor:
    """A host block standing in for a torch CUDA tensor."""

    def __init__(self, nbytes: int, device: str) -> None:
        self.block = np.zeros(nbytes, np.uint8)
        self.device = device

    def data_ptr(self) -> int:
        return int(self.block.ctypes.data)


def test_the_torch_source_wraps_its_tensor_in_a_cupy_array_on_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = fakecupy.with_arrays(fake_cupy(count=2))
    torch = fake_torch(count=2)
    made: list[_Tensor] = []

    def empty(nbytes: int, dtype: Any = None, device: str = "") -> _Tensor:
        made.append(_Tensor(nbytes, device))
        return made[-1]

    torch.empty = empty  # type: ignore[attr-defined]
    torch.uint8 = "uint8"  # type: ignore[attr-defined]
    install(monkeypatch, cupy=cupy, torch=torch)
    allocation = arena_cuda.TorchSource(CUDA1).allocate(384)
    (tensor,) = made
    assert tensor.device == "cuda:1"
    assert allocation.ptr == tensor.data_ptr() and allocation.device == CUDA1
    owner = allocation.owner
    assert isinstance(owner, fakecupy.ndarray) and owner.shape == (384,)
    assert owner.data.ptr == tensor.data_ptr()
    memory = owner.data.mem
    assert memory.ptr == tensor.data_ptr() and memory.size == 384
    assert memory.owner is tensor  # the tensor lives as long as the array
    assert memory.device_id == 1


# ---------------------------------------------------------------- pinned memory
class _PinnedPointer(bytearray):
    """``cupy.cuda.PinnedMemoryPointer`` over host bytes, recording its offset."""

    offsets: ClassVar[list[Any]] = []

    def __init__(self, nbytes: int, offset: Any) -> None:
        super().__init__(nbytes)
        _PinnedPointer.offsets.append(offset)
        self.ptr = 4096 + offset


def _pinned_cupy(monkeypatch: pytest.MonkeyPatch, count: int = 2) -> Any:
    cupy = fake_cupy(count=count)
    cupy.cuda.PinnedMemory = lambda nbytes, flags=0: nbytes
    _PinnedPointer.offsets = []
    cupy.cuda.PinnedMemoryPointer = _PinnedPointer
    install(monkeypatch, cupy=cupy, torch=None)
    return cupy


def test_pinned_memory_is_allocated_with_its_device_current_at_offset_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = _pinned_cupy(monkeypatch)
    source = arena_cuda.PinnedSource(1)
    assert repr(source) == "PinnedSource()"
    allocation = source.allocate(64)
    assert allocation.ptr == 4096 and allocation.nbytes == 64 and allocation.device == CPU
    assert _PinnedPointer.offsets == [0]
    assert cupy.calls == [("device", 1)]


def test_pinned_memory_on_a_device_cupy_does_not_see_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _pinned_cupy(monkeypatch, count=1)
    with pytest.raises(DeviceUnavailableError) as caught:
        arena_cuda.PinnedSource(1)
    # Round 13a's bug: "needs CUDA, and no CUDA device is visible here (None)", where
    # CuPy sees one GPU: the ordinal is what is missing.
    assert str(caught.value) == (
        "cuda:1 is not available: CuPy sees 1 CUDA device(s); use device='cpu' for a host "
        "arena or an ordinal below 1"
    )


def test_a_cuda_ordinal_torch_does_not_see_without_cupy_names_the_ordinals_that_exist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, cupy=None, torch=fake_torch(count=1))
    with pytest.raises(DeviceUnavailableError) as caught:
        arena_cuda.require_cuda(CUDA1)
    # Round 13a's bug: "cuda:1 is not available: no CUDA device is visible here (None)".
    assert str(caught.value) == (
        "cuda:1 is not available: torch sees 1 CUDA device(s); use device='cpu' for a host "
        "arena or an ordinal below 1"
    )
    with pytest.raises(DeviceUnavailableError, match=r"cuda:0 arena with this source needs CuPy"):
        arena_cuda.require_cuda(CUDA0)


def test_a_pinned_allocation_a_capture_refuses_names_the_call_and_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = _pinned_cupy(monkeypatch)

    def refused(nbytes: int, flags: int = 0) -> Any:
        raise CudaRuntimeError(906, "operation would make the legacy stream depend on a capture")

    cupy.cuda.PinnedMemory = refused
    with pytest.raises(GraphCaptureError) as caught:
        arena_cuda.PinnedSource(1).allocate(64)
    assert str(caught.value).startswith(
        "cudaHostAlloc on cuda:1 was requested while a CUDA graph capture refused it"
    )


# ---------------------------------------------------------------- RMM-style resources
def test_a_deallocate_that_takes_neither_call_is_refused_naming_both_calls() -> None:
    resource = types.SimpleNamespace(
        allocate=lambda nbytes, stream=None: 4096, deallocate=lambda ptr, *, nbytes: None
    )
    with pytest.raises(ConfigError) as caught:
        RmmSource(resource)
    assert " takes neither deallocate(ptr, nbytes) nor deallocate(ptr, nbytes, stream) " in str(
        caught.value
    )


def test_a_null_pointer_names_the_resource_that_returned_it() -> None:
    resource = Returning(value=0)
    with pytest.raises(ArenaOutOfMemoryError) as caught:
        RmmSource(resource).allocate(4096)
    assert str(caught.value).startswith(
        "Returning.allocate(4096) returned a null pointer (0), taken as out of memory"
    )


def test_a_cuda_resource_without_cupy_is_owned_by_a_torch_tensor_on_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = fake_torch(count=2)
    seen: list[tuple[Any, Any]] = []

    def as_tensor(block: Any, device: Any = None) -> Any:
        seen.append((block, device))
        return types.SimpleNamespace(block=block, device=device)

    torch.as_tensor = as_tensor  # type: ignore[attr-defined]
    install(monkeypatch, cupy=None, torch=torch)
    resource = HostResource()
    allocation = RmmSource(resource, CUDA1).allocate(4096)
    ((block, device),) = seen
    assert device == "cuda:1" and allocation.owner.device == "cuda:1"
    assert block.__cuda_array_interface__["data"] == (allocation.ptr, False)
    assert allocation.ptr in resource.blocks


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_allocates_and_frees_through_a_parents_rmm_source() -> None:
    resource = HostResource()
    source = RmmSource(resource)
    with warnings.catch_warnings():
        # Python 3.12+ (and JAX, where another test loaded it) warn that forking a
        # multi-threaded process may deadlock; the child here takes no lock but its own.
        warnings.simplefilter("ignore")
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the source works with its renewed lock
        code = 1
        try:
            allocation = source.allocate(4096)
            del allocation
            gc.collect()
            code = 0 if source.outstanding == 0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("text", ["cpu:²", "cuda:²", "gpu:¹²"])
def test_an_ordinal_of_digits_int_cannot_read_is_a_device_error(text: str) -> None:
    # Round 13a's bug: str.isdigit() accepts superscripts, which int() refuses: a
    # ValueError came out of parse_device in place of its DeviceError.
    with pytest.raises(DeviceError, match="cannot understand device"):
        parse_device(text)
    assert parse_device("cuda:\u0663") == Device("cuda", 3)  # decimal digits int() reads
