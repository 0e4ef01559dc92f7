"""A replayed step's hit follows every change of a request index's cache of remembered
views, on both hit paths: the compiled hit notes where it last found a request index's
entry (``step_memo`` in ``arena/planning/_region_hit.c``) and must never serve from a note the
cache has moved past (an entry replaced under the same key, the cache dict replaced,
a second request remembered beside the first, the entry removed), and the note holds no
references.

Each change makes the entry's remembered view a (8, 4) view where the request asks for
(4, 8) over the same bytes: a hit that served the stale entry would hand out the old
shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena
from arena.views.prepared import Prepared, server
from tests.refcounts import assert_counts_flat

F32 = "float32"
SPEC = ((4, 8), F32)
OTHER = ((16,), F32)


def _fresh(views: Any) -> list[Any]:
    """NumPy's fresh views (what the NumPy front's ``fresh_views`` makes)."""
    return [view.view() for view in views]


#: What a change replaced, kept alive: a hit that read a stale note would find it intact.
KEPT: list[Any] = []


def _reshaped(entry: Any, key: Any) -> Any:
    """A new entry for ``key``: ``entry``'s bytes as a (8, 4) view (``entry`` kept)."""
    KEPT.append(entry)
    views = [entry.views[0].reshape(8, 4)]
    new = Prepared(entry.required, views, key)
    new.serve = server(key, views, _fresh)
    return new


def _replace_entry(cache: dict[Any, Any]) -> None:
    (key,) = cache
    cache[key] = _reshaped(cache[key], key)


def _replace_dict(caches: list[dict[Any, Any]], r: int) -> None:
    (key,) = caches[r]
    KEPT.append(caches[r])
    caches[r] = {key: _reshaped(caches[r][key], key)}


def _add_beside(cache: dict[Any, Any]) -> None:
    (key,) = cache
    entry = cache[key]
    cache[key] = _reshaped(entry, key)
    other = (OTHER,)
    cache[other] = Prepared(entry.required, [entry.views[0].reshape(32)], other)


def _rekey(cache: dict[Any, Any]) -> None:
    """The same request under an equal key of other objects (the old key dropped)."""
    ((key, entry),) = cache.items()
    KEPT.append(key)
    del cache[key]
    twin = (((4, 8), F32),)
    assert twin == key and twin is not key
    cache[twin] = _reshaped(entry, twin)


CHANGES: dict[str, Callable[[list[dict[Any, Any]]], None]] = {
    "entry": lambda caches: _replace_entry(caches[0]),
    "dict": lambda caches: _replace_dict(caches, 0),
    "beside": lambda caches: _add_beside(caches[0]),
    "rekey": lambda caches: _rekey(caches[0]),
}


def _run(ws: Arena) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    with ws.step("k") as st:
        (a,) = st.get_simultaneous(SPEC)
        (b,) = st.get_simultaneous(OTHER)
        caches = st._caches
    return a.shape, b.shape, caches


def _hits(ws: Arena) -> Any:
    """Record, plan and replay the step, lock, and hit it twice; its caches."""
    for _ in range(3):  # record, plan, replay (remembered)
        _run(ws)
    ws.lock()  # locked: no request log to tell, the compiled hit serves
    for _ in range(2):  # hits (the compiled one notes where it found the entry)
        first, second, caches = _run(ws)
    assert (first, second) == ((4, 8), (16,))
    return caches


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_step_hit_follows_a_changed_cache(hit_path: str, change: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        caches = _hits(ws)
        assert caches is not None and all(len(cache) == 1 for cache in caches)
        CHANGES[change](caches)
        try:
            for _ in range(3):  # the first run after the change, and hits after it
                first, second, again = _run(ws)
                assert again is caches
                assert (first, second) == ((8, 4), (16,)), change
        finally:
            KEPT.clear()


def test_the_step_hit_follows_a_removed_entry(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        caches = _hits(ws)
        entry = caches[0][(SPEC,)]
        caches[0].clear()  # the checked path serves the request and remembers it again
        entry.views[0] = entry.views[0].reshape(8, 4)  # what a stale note would hand out
        shapes = [_run(ws)[:2] for _ in range(3)]
        assert shapes == [((4, 8), (16,))] * 3
        assert caches[0][(SPEC,)] is not entry


def test_the_step_hit_holds_no_note(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        caches = _hits(ws)
        cache = caches[0]
        ((key, entry),) = cache.items()
        watched = [cache, key, entry, entry.views]

        def hits() -> None:
            for _ in range(200):
                _run(ws)

        assert_counts_flat(watched, hits)
