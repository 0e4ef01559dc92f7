"""Findings of a hostile review, each pinned by a test that failed before its fix."""

from __future__ import annotations

import threading

import pytest

import arena
from arena import Arena, ArenaError, SpecError
from tests.sources import RecordingSource

F32 = "float32"


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("cached", [False, True])
def test_an_empty_request_returns_an_empty_list_on_every_path(framework: str, cached: bool) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework, cached=cached)
        assert front.get_simultaneous() == [] and front.try_get_simultaneous() == []
        front.get_simultaneous(((4,), F32))  # warm slot: plans exist
        assert front.get_simultaneous() == [] and front.get_simultaneous() == []
        a.lock()
        assert front.get_simultaneous() == []


@pytest.mark.parametrize("cached", [False, True])
def test_views_first_built_in_inference_mode_work_under_autograd_later(cached: bool) -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", cached_views=cached) as a:
        a.get_simultaneous(((8,), torch.float32))  # sized: the next sizes take the plan
        with torch.inference_mode():
            a.get_simultaneous(((4,), torch.float32))
            a.get_simultaneous(((4,), torch.float32))  # remembered now
        (view,) = a.get_simultaneous(((4,), torch.float32))
        x = torch.ones(4, requires_grad=True)
        view.copy_(x * 2)  # an in-place write of an autograd value into the view
        view.sum().backward()
        assert x.grad is not None and x.grad.tolist() == [2.0] * 4


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("shape", [(0, 2**70), (0, 2**62), (2**62, 0, 3)])
def test_a_zero_size_shape_with_a_huge_dimension_is_a_spec_error(
    framework: str, shape: tuple[int, ...]
) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        front.get_simultaneous(((4, 4), F32))  # the plan for 2-D float32 exists
        with pytest.raises(SpecError):
            front.get_simultaneous((shape, F32))


def test_a_resource_factory_runs_without_holding_the_arena() -> None:
    a = Arena("cpu", framework="numpy", ubatches=2)

    def factory() -> bool:
        done = threading.Event()

        def grow_another_slot() -> None:
            with a.ubatch(1):
                a.get_simultaneous(((1024,), F32))
            done.set()

        threading.Thread(target=grow_another_slot, daemon=True).start()
        return done.wait(timeout=10)

    assert a.get_persistent_resource("k", factory) is True
    assert a.get_persistent_resource("k", factory) is True  # built once
    a.close()


def test_a_source_returning_too_few_bytes_is_refused_and_given_back() -> None:
    class ShortSource(RecordingSource):
        def allocate(self, nbytes: int) -> arena.Allocation:
            return super().allocate(max(1, nbytes // 2))

    source = ShortSource()
    with Arena(source=source, framework="numpy") as a:
        with pytest.raises(ArenaError, match=r"returned 2048 bytes .* needs 4096"):
            a.get_simultaneous(((1024,), F32))
        stats = a.stats()
        assert stats.allocations == stats.frees + stats.live_blocks and source.live == {}


def test_server_factories_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.views import hit, plan

    monkeypatch.setattr(hit, "HIT_PATH", "python")  # servers are generated for Python hits
    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 16)
        for index in range(plan.MAX_SERVER_FACTORIES + 200):
            dims = [(1,) * (1 + index // 3**k % 3) for k in range(8)]  # ever-new dim counts
            specs = tuple((d, F32) for d in dims)
            a.get_simultaneous(*specs)
            a.get_simultaneous(*specs)  # the second sighting makes a server
    assert plan.server_factories() <= plan.MAX_SERVER_FACTORIES


def test_poison_covers_bytes_the_next_request_does_not_hand_out() -> None:
    import numpy as np

    with Arena("cpu", framework="numpy", poison=True) as a:
        (big,) = a.get_simultaneous(((1024,), F32))
        big[...] = 1.0
        a.get_simultaneous(((4,), F32))  # covers only the first 16 bytes
        assert np.isnan(big).all()
        x, y = a.get_simultaneous(((3,), F32), ((3,), F32))  # a gap between the views
        x[...] = 1.0
        y[...] = 1.0
        a.get_simultaneous(((3,), F32), ((3,), F32))
        assert np.isnan(x).all() and np.isnan(y).all()


def test_jax_zero_d_bfloat16_works_and_complex32_is_a_dtype_error() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")  # bfloat16 reaches JAX through torch's DLPack export
    with Arena("cpu", framework="jax") as a:
        (scalar,) = a.get_simultaneous(((), "bfloat16"))
        assert scalar.shape == () and str(scalar.dtype) == "bfloat16"
        with pytest.raises(arena.DTypeError, match="JAX has no complex32"):
            a.get_simultaneous(((4,), "complex32"))
