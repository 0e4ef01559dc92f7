"""Gaps the mutation rerun of the adapters group found (issue 26, item 12): each test fails
on the mutant it names (applied by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from arena import Arena, resolve_dtype
from arena.base.poison import sentinel_byte
from tests.fakecupy import ndarray as FakeArray
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import HostMemoryAsCuda, _load_cupy_front, fake_cupy


class _HostDuck:
    """An array of no framework: a dtype, a shape and ``__array__``, no DLPack."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.dtype = host.dtype
        self.shape = host.shape

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.host


def _copy(value: Any) -> Any:
    host = np.ascontiguousarray(value)
    array = FakeArray(host.shape, host.dtype)
    array[...] = host
    return array


def test_cupy_write_into_copies_a_value_without_dlpack_from_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # cupy.py write_into #11: getattr(value, "__dlpack_device__") without its default
    # raised AttributeError for a value that is an array by check_write's rule (a dtype
    # and a shape) but exports no DLPack.
    cupy = with_arrays(fake_cupy())
    _load_cupy_front(monkeypatch, cupy)
    monkeypatch.setattr(cupy, "asarray", _copy)
    source = HostMemoryAsCuda(cupy, cupy_owner=True)
    with Arena(source=source, framework="cupy", capture_probe=lambda: False) as a:
        (view,) = a.cupy.get_simultaneous(((3,), "int32"))
        value = _HostDuck(np.array([4, 5, 6], np.int32))
        assert not hasattr(value, "__dlpack_device__")
        assert a.cupy.write_into(view, value) is view
        assert view.get().tolist() == [4, 5, 6]


def test_debug_mode_keeps_a_torch_view_the_caller_made_require_grad() -> None:
    # torch.py retire_views #1: `isinstance(view, Tensor) or not view.requires_grad`
    # emptied a view that requires grad too, so a backward through it after the scope
    # raised (its saved tensor was changed by set_()).
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", debug=True) as ws:
        with ws.torch.scope() as scope:
            (x,) = scope.get_simultaneous(((4,), "float32"))
            x.copy_(torch.arange(4.0))
            x.requires_grad_()
            loss = (x * x).sum()
            (plain,) = scope.get_simultaneous(((4,), "float32"))
        assert plain.numel() == 0  # debug mode retired the plain view
        assert x.numel() == 4  # but not the one autograd holds
        loss.backward()
        assert x.grad is not None
        assert x.grad.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_poisoning_fills_a_zero_dimensional_view() -> None:
    # base.py Adapter.fill #3: reshape(None) kept a 0-d array 0-d, whose dtype NumPy
    # cannot change to uint8, so poisoning a scalar view raised at the scope's exit.
    sentinel = bytes([sentinel_byte(resolve_dtype("float32"))]) * 4
    with Arena("cpu", framework="numpy", poison=True) as ws:
        with ws.scope() as scope:
            (scalar,) = scope.get_simultaneous(((), "float32"))
            scalar[()] = 1.0
        assert scalar.tobytes() == sentinel


def test_jax_poisoning_gives_every_view_after_an_empty_one_its_sentinel() -> None:
    # jax.py JaxAdapter.fill #1, #3, #4: the byte count read as None, the test of an empty
    # view inverted, or `break` at an empty view left a new JAX int32 view holding the
    # float NaN bytes instead of its own integer sentinel.
    pytest.importorskip("jax")
    sentinel = bytes([sentinel_byte(resolve_dtype("int32"))]) * 16
    with Arena("cpu", framework="jax", poison=True) as ws:
        for _ in range(2):  # the second request is served by the remembered views
            (_empty, four) = ws.jax.get_simultaneous(((0,), "int32"), ((4,), "int32"))
            assert ctypes.string_at(ws.jax.data_ptr(four), 16) == sentinel
