"""Plants of branch plant43 (2026-12-03) in the compiled step rows that the suite did not
catch (``arena/planning/_rows.c``, ``arena/planning/_step_rows.h``): each test names the
bug it kills (docs/plants/plant43.md)."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena, ArenaError
from arena.views.prepared import Prepared, server
from tests.extensions import need_step_rows

F32 = "float32"


def _run(ws: Arena, shape: tuple[int, ...]) -> tuple[Any, Any]:
    with ws.numpy.step("rows") as st:
        (view,) = st.get_simultaneous((shape, "uint8"))
        caches = st._caches
    return view, caches


def test_a_row_does_not_serve_a_dimension_past_2_30_with_the_same_low_digit() -> None:
    """Kills: step_row_request_is reading a request's dimension by its low 30-bit digit
    without checking it is a one-digit int (``size > 1`` left out): a request of
    ``2**30 + 5`` rows was served the row of a remembered request of 5 rows (on a locked
    arena, where the replay must refuse it: the request leaves the plan)."""
    compiled = need_step_rows()
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            _run(ws, (5, 1))
        ws.lock()
        view, caches = _run(ws, (5, 1))
        assert compiled.noted(caches, 0)
        view, _ = _run(ws, (5, 1))
        assert view.shape == (5, 1)  # the row serves its own request
        with ws.numpy.step("rows") as st, pytest.raises(ArenaError, match="rows"):
            st.get_simultaneous((((1 << 30) + 5, 1), "uint8"))


def test_a_row_goes_stale_when_its_own_dict_changes_in_place() -> None:
    """Kills: step_row_of taking a row whatever its dict's version tag (the check left
    out): the entry replaced in the very dict noted (not a new dict) was not seen, and
    the hit served the old entry's views."""
    compiled = need_step_rows()
    spec = ((4, 16), "float32")
    with Arena("cpu", framework="numpy") as ws:

        def run() -> tuple[Any, Any]:
            with ws.numpy.step("rows") as st:
                (view,) = st.get_simultaneous(spec)
                caches = st._caches
            return view, caches

        for _ in range(3):
            run()
        ws.lock()
        _, caches = run()
        assert compiled.noted(caches, 0)
        cache = caches[0]
        ((key, entry),) = cache.items()
        views = [entry.views[0].reshape(16, 4)]  # the same bytes, another shape
        new = Prepared(entry.required, views, key)
        new.serve = server(key, views, lambda made: [v.view() for v in made])
        cache[key] = new  # in place: the same dict, another entry
        assert caches[0] is cache and not compiled.noted(caches, 0)
        for _ in range(2):
            view, _ = run()
            assert view.shape == (16, 4)
