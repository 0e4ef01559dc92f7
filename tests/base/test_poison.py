"""Poisoning: stale views read NaN (floats) or a pattern (integers), on every path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import arena
from arena import Arena
from arena.base.poison import NAN_BYTE, NAN_BYTE_FNUZ, PATTERN_BYTE, sentinel
from tests.sources import RecordingSource

F32 = "float32"


@pytest.mark.parametrize("cached", [False, True])
def test_poison_makes_a_stale_numpy_view_read_nan(cached: bool) -> None:
    with arena.Arena("cpu", framework="numpy", poison=True, cached_views=cached) as ws:
        old, counts = ws.get_simultaneous(((64,), "float32"), ((8,), "int32"))
        old[...] = 1.0
        counts[...] = 7
        ws.get_simultaneous(((64,), "float32"), ((8,), "int32"))  # the next request
        assert np.isnan(old).all()
        assert (counts.view(np.uint8) == PATTERN_BYTE).all()


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_poison_covers_views_a_plan_builds_for_new_sizes(framework: str) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    with arena.Arena("cpu", framework="numpy", poison=True) as ws:
        front = ws.front(framework)
        ws.reserve_bytes(1 << 16)
        front.get_simultaneous(((8, 4), "float32"))  # the structure's plan now exists
        for rows in (3, 5, 5, 9):  # first sightings (handed out as built) and a repeat
            (view,) = front.get_simultaneous(((rows, 4), "float32"))
            assert np.isnan(np.asarray(view)).all(), rows


def test_without_poison_a_stale_view_keeps_its_bytes() -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        (old,) = ws.get_simultaneous(((64,), "float32"))
        old[...] = 1.0
        ws.get_simultaneous(((64,), "float32"))
        assert (old == 1.0).all()


def test_poison_from_the_environment_and_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_POISON", "1")
    with arena.Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((64,), "float32"))
        ws.lock()
        (view,) = ws.get_simultaneous(((64,), "float32"))  # a locked hit is poisoned too
        assert np.isnan(view).all()


def test_poison_torch_views() -> None:
    torch = pytest.importorskip("torch")
    with arena.Arena("cpu", framework="torch", poison=True) as ws:
        half, ints = ws.get_simultaneous(((4, 4), torch.bfloat16), ((3,), torch.int64))
        assert torch.isnan(half).all()
        assert ints.view(torch.uint8).eq(PATTERN_BYTE).all()
        (scalar,) = ws.get_simultaneous(((), torch.float32))
        assert torch.isnan(scalar)


def test_poison_jax_views() -> None:
    pytest.importorskip("jax")
    with arena.Arena("cpu", framework="numpy", poison=True) as ws:
        (view,) = ws.jax.get_simultaneous(((16,), "float32"))
        assert np.isnan(np.asarray(view)).all()


def test_sentinel_bytes_are_a_nan_for_every_floating_dtype() -> None:
    assert sentinel("float32") == sentinel("bfloat16") == sentinel("complex64") == NAN_BYTE
    assert sentinel("float8_e4m3fnuz") == sentinel("float8_e5m2fnuz") == NAN_BYTE_FNUZ
    assert sentinel("float4_e2m1fn_x2") == sentinel("int8") == sentinel("bool") == PATTERN_BYTE
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name in (
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    ):
        dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
        value = np.full(dtype.itemsize, sentinel(name), np.uint8).view(dtype)
        assert np.isnan(value.astype(np.float32)).all(), name


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


def _scope_grown_by_scope(ws: Arena) -> Any:
    with ws.scope() as s:
        (view,) = s.get_simultaneous(((16,), F32))
        view[...] = 1.0
        s.get_simultaneous(((4096,), F32))  # the slot grows: the view stays in the old block
    return view


def _scope_grown_by_plain(ws: Arena) -> Any:
    with ws.scope() as s:
        (view,) = s.get_simultaneous(((16,), F32))
        view[...] = 1.0
        ws.get_simultaneous(((4096,), F32))
    return view


def _step_exit(ws: Arena) -> Any:
    with ws.step("k") as step:
        (view,) = step.get_simultaneous(((16,), F32))
        view[...] = 1.0
        step.get_simultaneous(((4096,), F32))
    return view


def _step_release(ws: Arena) -> Any:
    with ws.step("k") as step:
        (view,) = step.get_simultaneous(((16,), F32))
        view[...] = 1.0
        step.get_simultaneous(((4096,), F32))
        step.release(view)
        assert np.isnan(view).all()  # at release, while the step runs
    return view


def _replay(release: bool) -> Callable[[Arena], Any]:
    def program(ws: Arena) -> Any:
        for run in range(2):  # a recording run, then a replay grown by a plain request
            with ws.step("k") as step:
                (view,) = step.get_simultaneous(((16,), F32))
                view[...] = 1.0
                if run:
                    ws.get_simultaneous(((1 << 16,), F32))
                if release:
                    step.release(view)
                    assert np.isnan(view).all()
        return view

    return program


def _scope_in_step(ws: Arena) -> Any:
    with ws.step("k"), ws.scope() as s:
        (view,) = s.get_simultaneous(((16,), F32))
        view[...] = 1.0
        s.get_simultaneous(((4096,), F32))
    return view


def _plain(ws: Arena) -> Any:
    (view,) = ws.get_simultaneous(((16,), F32))
    view[...] = 1.0
    ws.get_simultaneous(((4096,), F32))  # the next request grows the slot
    return view


@pytest.mark.parametrize(
    "program",
    [
        _scope_grown_by_scope,
        _scope_grown_by_plain,
        _step_exit,
        _step_release,
        _replay(release=False),
        _replay(release=True),
        _scope_in_step,
        _plain,
    ],
    ids=[
        "scope-exit-grown-by-scope",
        "scope-exit-grown-by-plain",
        "step-exit",
        "step-release",
        "replay-exit",
        "replay-release",
        "scope-in-step",
        "plain-next-request",
    ],
)
def test_poison_reaches_stale_views_in_the_block_a_growth_replaced(
    program: Callable[[Arena], Any],
) -> None:
    source = RecordingSource()
    with arena.Arena("cpu", framework="numpy", poison=True, source=source) as ws:
        view = program(ws)
        assert len(source.allocations()) >= 2  # the slot grew while the view lived
        assert np.isnan(view).all()
