"""Gaps the mutation run of issue 26 (Round 6) found in :mod:`arena.front`; each test was
seen to fail with its mutant planted by hand. Run on both hit paths (``hit_path``)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from arena import Arena
from tests.inplace import set_shape

SPECS = (((4, 8), "float32"), ((16,), "int32"))


def _reshape(view: Any, framework: str) -> None:
    """Change the caller's own view's shape in place (its shape is its own to change)."""
    if framework == "torch":
        view.resize_(32)
    else:
        set_shape(view, (32,))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_replayed_step_hands_out_new_view_objects_each_run(hit_path: str, framework: str) -> None:
    # front.py Front.step #8 (fresh_view=None): the compiled step hit handed out its
    # remembered view objects themselves, so a caller's reshape of one run's view changed
    # the next run's.
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        runs = []
        for run in range(6):
            if run == 2:
                a.lock()  # warmed up: the runs from here are hits
            with front.step("s") as st:
                views = st.get_simultaneous(*SPECS)
                assert [tuple(v.shape) for v in views] == [(4, 8), (16,)]
                pointers = [front.data_ptr(v) for v in views]
                runs.append(views)
                _reshape(views[0], framework)
        for before, after in itertools.pairwise(runs):
            assert all(x is not y for x, y in zip(before, after, strict=True))
        with front.step("s") as st:
            views = st.get_simultaneous(*SPECS)
            assert [tuple(v.shape) for v in views] == [(4, 8), (16,)]
            assert [front.data_ptr(v) for v in views] == pointers


def test_a_locked_steps_hits_stay_off_the_python_request_path(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # front.py Front.step #15 (fresh_view left out, so False): every request of a step
    # took the Python path on the compiled hit path (the same views, at the cost the
    # compiled step hit is there to save).
    from arena.planning import steps

    if hit_path == "python":
        pytest.skip("the Python hit path serves every request through the Python path")
    with Arena("cpu", framework="numpy") as a:
        for _ in range(2):
            with a.step("s") as st:
                st.get_simultaneous(*SPECS)
        a.lock()
        calls: list[object] = []
        real = steps.Step._python_get
        monkeypatch.setattr(
            steps.Step, "_python_get", lambda self, *s: (calls.append(s), real(self, *s))[1]
        )
        for _ in range(3):
            with a.step("s") as st:
                x, y = st.get_simultaneous(*SPECS)
                assert (x.shape, y.shape) == ((4, 8), (16,))
        assert calls == []


def test_a_locked_jax_request_that_must_grow_raises(hit_path: str) -> None:
    # front.py Front._python_request #9 (strict None): on the compiled path a JAX front's
    # requests go to Python whole, and a get_simultaneous that must grow while locked
    # returned None instead of raising.
    pytest.importorskip("jax")
    from arena import ArenaLockedError

    with Arena("cpu", framework="jax") as a:
        a.get_simultaneous(((16,), "float32"))
        a.lock()
        with pytest.raises(ArenaLockedError):
            a.get_simultaneous(((1 << 20,), "float32"))
        assert a.try_get_simultaneous(((1 << 20,), "float32")) is None
        (view,) = a.get_simultaneous(((16,), "float32"))
        assert tuple(view.shape) == (16,)


def test_a_front_without_numpys_c_api_table_serves_without_the_planner(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # front.py _planner #22 (getattr without a default): a NumPy whose core module is not
    # where the Planner looks made every new front raise AttributeError instead of going
    # without the Planner.
    import sys

    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        monkeypatch.setitem(sys.modules, name, None)
    with Arena("cpu", framework="numpy") as a:
        for n in range(3):
            (view,) = a.get_simultaneous(((n + 4,), "float32"))
            assert view.shape == (n + 4,)
