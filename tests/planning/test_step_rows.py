"""A replayed step's cache list keeps one row per request index for the compiled step hit
(``arena/planning/_rows.c``, ``arena/planning/_step_rows.h``): noted when the replay
remembers the request index's views, read by the hit instead of the dict, the entry's
views list and the view, and stale (the hit reads the dict again) once the request
index's dict changes. The rows hold the views they copy, and nothing else, and release
them with the list.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.planning import region_hit, rows
from arena.views import hit
from arena.views.prepared import Prepared, server
from tests.conftest import need_compiled_hit
from tests.extensions import DICT_VERSION_TAGS, need_step_rows
from tests.inplace import set_shape

F32 = "float32"
SPEC = ((4, 16), F32)


def _run(ws: Arena, specs: list[tuple[Any, ...]]) -> tuple[list[Any], Any]:
    with ws.numpy.step("rows") as st:
        views = [st.get_simultaneous(*request) for request in specs]
        caches = st._caches
    return views, caches


def _replayed(ws: Arena, specs: list[tuple[Any, ...]]) -> Any:
    """Record, plan and replay ``specs`` (remembered), lock; the step's cache list."""
    for _ in range(3):
        _run(ws, specs)
    ws.lock()
    return _run(ws, specs)[1]


def test_a_replay_notes_a_row_per_one_view_request() -> None:
    compiled = need_step_rows()
    specs = [
        (SPEC,),
        (((), "float64"),),
        (((2, 3, 4, 5), "int8"),),
        (((2, 2, 2, 2, 2), F32),),  # five dimensions: no row
        (((3,), F32), ((5,), "int32")),  # two views: no row
        (((1 << 31, 0), F32),),  # a dimension past 2**30 (no bytes): no row
    ]
    with Arena("cpu", framework="numpy") as ws:
        caches = _replayed(ws, specs)
        assert type(caches) is compiled.StepCaches and isinstance(caches, list)
        assert [compiled.noted(caches, r) for r in range(len(specs))] == [True] * 3 + [False] * 3
        for _ in range(3):  # served alike with a row and without one
            views, again = _run(ws, specs)
            assert again is caches
            assert [[v.shape for v in made] for made in views] == [
                [shape for shape, _ in request] for request in specs
            ]


def test_the_hit_reads_the_row_not_the_view() -> None:
    """What a row is for: the hit makes the fresh view from the row's copy, not from the
    remembered view. A remembered view changed in place (nothing in arena does it: see
    ``_step_rows.h``) is not seen while the row stands; the Python path reads the view."""
    compiled = need_step_rows()
    with Arena("cpu", framework="numpy") as ws:
        caches = _replayed(ws, [(SPEC,)])
        assert compiled.noted(caches, 0)
        (entry,) = caches[0].values()
        set_shape(entry.views[0], (16, 4))  # in place: the dict, entry and list unchanged
        assert compiled.noted(caches, 0)
        ((view,),), _ = _run(ws, [(SPEC,)])
        assert view.shape == (4, 16)
        hit.HIT_PATH = "python"
        try:
            ((view,),), _ = _run(ws, [(SPEC,)])
        finally:
            hit.HIT_PATH = "compiled"
        assert view.shape == (16, 4)


def _reshaped(caches: Any) -> None:
    """caches[0] replaced by a dict whose entry's view is (16, 4) where the request is
    (4, 16), over the same bytes: a hit reading a stale row would hand out (4, 16)."""
    ((key, entry),) = caches[0].items()
    views = [entry.views[0].reshape(16, 4)]
    new = Prepared(entry.required, views, key)
    new.serve = server(key, views, lambda made: [v.view() for v in made])
    caches[0] = {key: new}


def test_a_row_goes_stale_when_its_dict_changes() -> None:
    compiled = need_step_rows()
    with Arena("cpu", framework="numpy") as ws:
        caches = _replayed(ws, [(SPEC,), (SPEC,)])
        old = caches[0]
        _reshaped(caches)
        assert not compiled.noted(caches, 0) and compiled.noted(caches, 1)
        for _ in range(3):
            ((first,), (second,)), _ = _run(ws, [(SPEC,), (SPEC,)])
            assert (first.shape, second.shape) == ((16, 4), (4, 16))
        caches[1][("other",)] = old  # a second key beside the first: stale too
        assert not compiled.noted(caches, 1)
        # Noted again from what the dict holds now.
        assert compiled.note(caches, 0) and not compiled.note(caches, 1)
        ((first,), (second,)), _ = _run(ws, [(SPEC,), (SPEC,)])
        assert (first.shape, second.shape) == ((16, 4), (4, 16))


class _Changing:
    """An entry whose ``views`` lookup empties its own dict (as Python code run by an
    attribute lookup could): the row must not be noted."""

    def __init__(self, cache: dict[Any, Any], view: Any, key: Any) -> None:
        self._cache, self._view, self.key = cache, view, key

    @property
    def views(self) -> list[Any]:
        self._cache.clear()
        return [self._view]


def test_note_notes_nothing_when_reading_the_entry_changed_the_dict() -> None:
    compiled = need_step_rows()
    key = (SPEC,)
    cache: dict[Any, Any] = {}
    cache[key] = _Changing(cache, np.zeros((4, 16), np.float32)[...], key)
    caches = compiled.StepCaches([cache])
    assert not compiled.note(caches, 0) and not compiled.noted(caches, 0)
    entry = Prepared(256, [np.zeros((4, 16), np.float32)[...]], key)
    caches[0] = {key: entry}
    assert compiled.note(caches, 0) and compiled.noted(caches, 0)
    entry.key = (SPEC,)  # an equal key of other objects: the entry is not the key's
    assert not compiled.note(caches, 0)
    with pytest.raises(IndexError):
        compiled.note(caches, 1)
    with pytest.raises(TypeError):
        compiled.note([cache], 0)


def test_rows_hold_their_views_until_the_list_goes() -> None:
    compiled = need_step_rows()
    key = (SPEC,)
    owner = np.zeros(256, np.uint8)
    view = owner[:256].view(np.float32).reshape(4, 16)
    views = [view]
    entry = Prepared(256, views, key)
    caches = compiled.StepCaches([{key: entry}])
    counts = [sys.getrefcount(o) for o in (view, views, owner, entry, key)]
    assert compiled.note(caches, 0)
    # The row holds the views list, the view, its dtype and its base's owner; not the
    # entry or the key (the dict holds them).
    after = [sys.getrefcount(o) for o in (view, views, owner, entry, key)]
    assert [b - a for a, b in zip(counts, after, strict=True)] == [1, 1, 1, 0, 0]
    for _ in range(100):  # noted again: the old row's references go
        assert compiled.note(caches, 0)
    assert [sys.getrefcount(o) for o in (view, views, owner, entry, key)] == after
    dead = weakref.ref(view)
    caches.append(caches)  # a cycle through the list: the collector frees it with its rows
    del caches, entry, views, view
    gc.collect()
    assert dead() is None
    assert sys.getrefcount(owner) == 2  # the name and the call: the view and row let go


def test_the_pure_python_path_keeps_a_plain_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "compiled", None)
    caches = rows.new_caches(3)
    assert type(caches) is list and caches == [{}, {}, {}]
    assert rows.note_row(caches, 0) is False


def test_no_rows_without_the_compiled_step_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``arena.planning._region_hit`` is not loaded nothing would read a row: the
    rows' extension is not used (not loaded, nothing bound), and the lists are plain."""
    monkeypatch.setattr(region_hit, "compiled", None)
    monkeypatch.setattr(region_hit, "WHY_PYTHON", "the extension is not built")
    assert rows._load() == (None, "the extension is not built")


def test_the_rows_extension_is_built_wherever_the_compiled_step_hit_is() -> None:
    """``arena.planning._rows`` builds with the compiled step hit, on every CPython: with
    rows where dicts have version tags, without (``ROWS`` 0: its ``note`` notes nothing)
    from 3.12 on. The install builds every extension as optional, so one that fails to
    compile is only missing: on 3.12 the row's building read an int's ``ob_digit``, which
    3.12 renamed, and the module was not built there (rows.WHY_PYTHON said so)."""
    need_compiled_hit()
    assert rows.compiled is not None, rows.WHY_PYTHON
    assert rows.compiled.ROWS == DICT_VERSION_TAGS
    caches = rows.new_caches(2)
    assert type(caches) is rows.compiled.StepCaches and caches == [{}, {}]
