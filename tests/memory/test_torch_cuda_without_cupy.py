"""torch on CUDA with torch alone, checked on the CPU.

CuPy is hidden and torch is made to report one CUDA device whose ``torch.empty`` hands out
host tensors: the arena's own code paths (device counting, the default source, the torch
source, the empty allocation, the torch views, the CuPy front's message, the vLLM drop-in)
run exactly as they would on a GPU without CuPy. Nothing here touches a GPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import arena
from arena import Arena, Device, FrameworkUnavailableError
from arena.memory import devices
from arena.memory.cuda import TorchSource
from arena.memory.sources import empty_allocation
from tests.faketorch import host_torch_empty

torch = pytest.importorskip("torch")


class _Stream:
    cuda_stream = 0


class _Event:
    def record(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


@pytest.fixture
def torch_only_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """CuPy missing, torch sees one CUDA device; yields the devices torch.empty was given."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "cupy" else real_find_spec(name, *a),
    )
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.delitem(sys.modules, "arena.adapters.cupy", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    # Stream-ordered release records an event on torch's current stream; on this stand-in
    # device every event has completed at once.
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    asked = host_torch_empty(monkeypatch, torch)
    devices.forget_device_counts()
    yield asked
    devices.forget_device_counts()


def test_device_discovery_needs_no_cupy(torch_only_gpu: list[Any]) -> None:
    assert devices.cuda_device_count() == 1
    assert arena.default_device() == Device("cuda", 0)


def test_torch_source_needs_no_cupy(torch_only_gpu: list[Any]) -> None:
    source = TorchSource(Device("cuda", 0))
    allocation = source.allocate(1024)
    assert torch_only_gpu == ["cuda:0"]
    assert isinstance(allocation.owner, torch.Tensor)
    assert allocation.owner.dtype == torch.uint8 and allocation.owner.shape == (1024,)
    assert allocation.ptr == allocation.owner.data_ptr()
    assert allocation.device == Device("cuda", 0)


def test_empty_allocation_needs_no_cupy(torch_only_gpu: list[Any]) -> None:
    allocation = empty_allocation(Device("cuda", 1))
    assert torch_only_gpu == ["cuda:1"]
    assert isinstance(allocation.owner, torch.Tensor) and allocation.nbytes == 0


def test_a_cuda_arena_works_with_torch_alone(torch_only_gpu: list[Any]) -> None:
    with Arena("cuda:0", framework="torch") as a:  # the default source becomes "torch"
        assert a.device == Device("cuda", 0)
        x, y = a.get_simultaneous(((4, 8), torch.float32), ((16,), torch.int32))
        assert y.data_ptr() - x.data_ptr() == 256
        (empty,) = a.get_simultaneous(((0,), torch.float16))
        assert empty.numel() == 0
        a.lock()
        (again,) = a.get_simultaneous(((4, 8), torch.float32))
        assert again.data_ptr() == x.data_ptr()
    assert torch_only_gpu and set(torch_only_gpu) == {"cuda:0"}


def test_the_cupy_front_says_it_needs_cupy(torch_only_gpu: list[Any]) -> None:
    with (
        Arena("cuda:0", source="torch", framework="torch") as a,
        pytest.raises(FrameworkUnavailableError, match=r"CuPy front needs CuPy.*cuda12"),
    ):
        a.cupy.get_simultaneous(((4,), "float32"))


def test_vllm_workspace_manager_works_with_torch_alone(torch_only_gpu: list[Any]) -> None:
    from arena.compat.vllm import WorkspaceManager

    manager = WorkspaceManager(torch.device("cuda", 0))
    a, b = manager.get_simultaneous(((2, 3), torch.float16), ((5,), torch.int64))
    assert a.shape == (2, 3) and b.dtype == torch.int64
    manager.lock()
    assert manager.get_simultaneous(((2, 3), torch.float16))[0].data_ptr() == a.data_ptr()
    manager.arena.close()  # while the stand-in device is there (collected, it releases too)


def test_zeroed_persistent_buffer_with_torch_alone(torch_only_gpu: list[Any]) -> None:
    with Arena("cuda:0", source="torch", framework="torch") as a:
        p = a.get_persistent("acc", (8,), torch.float32, zero_init=True)
        assert float(p.sum()) == 0.0


def test_the_cupy_adapter_accepts_a_torch_owned_buffer() -> None:
    cupy = pytest.importorskip("cupy", reason="needs CuPy installed (no GPU needed)")
    adapter = importlib.import_module("arena.adapters.cupy").ADAPTER
    owner = torch.arange(64, dtype=torch.uint8)  # stands in for the torch source's tensor
    allocation = arena.Allocation(owner.data_ptr(), 64, owner, Device("cuda", 0))
    base = adapter.wrap(allocation)
    assert isinstance(base, cupy.ndarray) and base.shape == (64,)
    assert base.data.ptr == owner.data_ptr() and base.data.device_id == 0
    assert base.data.mem._owner is owner  # the tensor stays alive as long as the view
