"""Cached fronts: the very same view objects for a repeated request, until the buffer changes."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena, ArenaWarning
from tests.gates import moving_only
from tests.inplace import set_dtype, set_shape

F32 = "float32"
SPECS = (((4, 8), F32), ((16,), "int32"))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_repeated_requests_return_the_same_objects(framework: str) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework, cached=True)
        assert front.cached and not a.front(framework).cached
        first = front.get_simultaneous(*SPECS)
        again = front.get_simultaneous(*SPECS)
        assert again is not first  # a new list ...
        assert all(x is y for x, y in zip(first, again, strict=True))  # ... of the same views
        a.lock()
        assert all(x is y for x, y in zip(first, front.try_get_simultaneous(*SPECS), strict=True))


@moving_only("asserts that growth moves the pointer; in place it stays")
def test_growth_invalidates_cached_views() -> None:
    with Arena("cpu", framework="numpy", cached_views=True) as a:
        (x,) = a.get_simultaneous(((8,), "float32"))
        a.get_simultaneous(((1 << 16,), "float32"))
        (y,) = a.get_simultaneous(((8,), "float32"))
        assert y is not x
        assert a.numpy.data_ptr(y) != a.numpy.data_ptr(x)


def test_in_place_metadata_change_is_detected_and_rebuilt_in_debug_mode() -> None:
    with Arena("cpu", framework="numpy", cached_views=True, debug=True) as a:
        (x, _) = a.get_simultaneous(*SPECS)
        set_shape(x, (32,))  # what a caller must not do with a cached view
        with pytest.warns(ArenaWarning, match=r"changed in place .*\(\(4, 8\), .* -> \(\(32,\)"):
            (y, _) = a.get_simultaneous(*SPECS)
        assert y.shape == (4, 8) and y is not x
        (z, _) = a.get_simultaneous(*SPECS)
        assert z is y


def test_torch_in_place_resize_is_detected_in_debug_mode() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", cached_views=True, debug=True) as a:
        (x,) = a.get_simultaneous(((4, 8), torch.float32))
        x.unsqueeze_(0)
        with pytest.warns(ArenaWarning):
            (y,) = a.get_simultaneous(((4, 8), torch.float32))
        assert y.shape == (4, 8)


def test_numpy_in_place_dtype_change_is_detected_in_debug_mode() -> None:
    with Arena("cpu", framework="numpy", cached_views=True, debug=True) as a:
        (x,) = a.get_simultaneous(((4, 8), "float32"))
        set_dtype(x, "int32")  # same itemsize: the shape stays (4, 8)
        with pytest.warns(ArenaWarning, match="int32"):
            (y,) = a.get_simultaneous(((4, 8), "float32"))
        assert y.dtype == "float32"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.t_(), id="t_"),
        pytest.param(lambda t: t.as_strided_((4, 8), (1, 4)), id="as_strided_ strides"),
        pytest.param(lambda t: t.as_strided_((4, 8), (8, 1), 1), id="as_strided_ offset"),
        pytest.param(lambda t: t.set_(t.untyped_storage(), 8, (4, 8), (8, 1)), id="set_"),
    ],
)
def test_torch_in_place_strides_and_offset_changes_are_detected(change: Any) -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", cached_views=True, debug=True) as a:
        (x,) = a.get_simultaneous(((4, 8), torch.float32))
        change(x)
        with pytest.warns(ArenaWarning, match="changed in place"):
            (y,) = a.get_simultaneous(((4, 8), torch.float32))
        assert y.shape == (4, 8) and y.stride() == (8, 1) and y is not x


def test_uncached_front_is_unaffected_by_cached_callers() -> None:
    with Arena("cpu", framework="numpy") as a:
        (cached,) = a.front("numpy", cached=True).get_simultaneous(((4, 8), "float32"))
        set_shape(cached, (2, 16))
        (fresh,) = a.numpy.get_simultaneous(((4, 8), "float32"))
        assert fresh.shape == (4, 8)
        assert a.numpy.data_ptr(fresh) == a.numpy.data_ptr(cached)


def test_without_debug_cached_views_are_not_checked() -> None:
    with Arena("cpu", framework="numpy", cached_views=True, debug=False) as a:
        (x,) = a.get_simultaneous(((4, 8), "float32"))
        set_shape(x, (32,))
        (y,) = a.get_simultaneous(((4, 8), "float32"))
        assert y is x and y.shape == (32,)  # the documented hazard: the caller broke the contract


def test_torch_requires_grad_is_detected_so_the_next_in_place_write_works() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", cached_views=True, debug=True) as a:
        (x,) = a.get_simultaneous(((4, 8), torch.float32))
        x.requires_grad_()  # one caller wants gradients for its tensor ...
        with pytest.warns(ArenaWarning, match=r"requires_grad.*False\) -> .*True\)"):
            (y,) = a.get_simultaneous(((4, 8), torch.float32))
        assert y is not x and not y.requires_grad
        y.add_(1.0)  # ... the next caller's in-place write must still work
        y.copy_(torch.ones(4, 8))
        (z,) = a.get_simultaneous(((4, 8), torch.float32))
        assert z is y
