"""A repeated scope request follows every change of the front's scope cache, on both hit
paths: the compiled hit notes where it last found a request's entry (the cache dict, its
state and the entry, in ``ScopeMemo`` in ``arena/planning/_region_hit.c``) and takes that entry
without probing the dict while the dict is in that state; it must never serve from a note
the cache has moved past (the entry replaced under the same key, a key added beside it,
the same request under an equal key of other objects, the entry removed), and the note
holds no references.

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
#: The scope cache of the NumPy front (``Buffer.prepared``), keyed (top, specs).
MEMO = "numpy/scope"

#: What a change replaced, kept alive: a hit that read a stale note would find it intact.
KEPT: list[Any] = []


def _fresh(views: Any) -> list[Any]:
    """NumPy's fresh views (what the NumPy front's ``fresh_views`` makes)."""
    return [view.view() for view in views]


def _reshaped(entry: Any, key: Any) -> Any:
    """A new entry for ``key``: ``entry``'s bytes as a (8, 4) view (``entry`` kept)."""
    KEPT.append(entry)
    views = [entry.views[0].reshape(8, 4)]
    new = Prepared(entry.required, views, key)
    new.serve = server(key[1], views, _fresh)
    return new


def _key(cache: dict[Any, Any]) -> Any:
    (key,) = [key for key in cache if key[1] == (SPEC,)]
    return key


def _replace_entry(cache: dict[Any, Any]) -> None:
    key = _key(cache)
    cache[key] = _reshaped(cache[key], key)


def _add_beside(cache: dict[Any, Any]) -> None:
    key = _key(cache)
    entry = cache[key]
    cache[key] = _reshaped(entry, key)
    other = (0, (((16,), F32),))
    cache[other] = Prepared(entry.required, [entry.views[0].reshape(32)], other)


def _rekey(cache: dict[Any, Any]) -> None:
    """The same request under an equal key of other objects (the old key dropped)."""
    key = _key(cache)
    entry = cache.pop(key)
    KEPT.append(key)
    twin = (0, (((4, 8), F32),))
    assert twin == key and twin is not key
    cache[twin] = _reshaped(entry, twin)


CHANGES: dict[str, Callable[[dict[Any, Any]], None]] = {
    "entry": _replace_entry,
    "beside": _add_beside,
    "rekey": _rekey,
}


def _run(ws: Arena) -> tuple[int, ...]:
    with ws.numpy.scope() as s:
        (view,) = s.get_simultaneous(SPEC)
    return tuple(view.shape)


def _hits(ws: Arena) -> dict[Any, Any]:
    """Remember the request, lock, and hit it until the hit takes its noted entry; the
    scope cache."""
    ws.reserve_bytes(1 << 16)
    for _ in range(2):
        _run(ws)
    ws.lock()  # locked: no request log to tell, the compiled hit serves
    # Hits: the first locked request notes its load (Python), the compiled hit then
    # remembers the key, finds the entry by it and notes where, and takes the noted entry.
    for _ in range(5):
        assert _run(ws) == (4, 8)
    with ws.numpy.scope() as s:
        assert s.slot is not None
        found: dict[Any, Any] = s.slot.buffer.prepared[MEMO]
    return found


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_scope_hit_follows_a_changed_cache(hit_path: str, change: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        cache = _hits(ws)
        CHANGES[change](cache)
        try:
            assert [_run(ws) for _ in range(3)] == [(8, 4)] * 3, change
        finally:
            KEPT.clear()


def test_the_scope_hit_follows_a_removed_entry(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        cache = _hits(ws)
        key = _key(cache)
        entry = cache.pop(key)  # the checked path serves the request and remembers it again
        entry.views[0] = entry.views[0].reshape(8, 4)  # what a stale note would hand out
        assert [_run(ws) for _ in range(3)] == [(4, 8)] * 3
        assert cache[_key(cache)] is not entry


def test_the_scope_hit_holds_no_note(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        cache = _hits(ws)
        key = _key(cache)
        entry = cache[key]
        watched = [cache, key, entry, entry.views]

        def hits() -> None:
            for _ in range(200):
                _run(ws)

        assert_counts_flat(watched, hits)


def test_the_scope_hit_follows_a_replaced_scope_cache(hit_path: str) -> None:
    """The buffer's dict of caches given a new scope cache under the front's key: the hit
    reads the new one. The compiled hit notes which cache that dict mapped the key to (in
    ``scope_cache_of``, with the dict's state then); slip: the note taken without the
    state (the old cache, kept alive here, would serve the (4, 8) view)."""
    with Arena("cpu", framework="numpy") as ws:
        cache = _hits(ws)
        with ws.numpy.scope() as s:
            assert s.slot is not None
            prepared = s.slot.buffer.prepared
        key = _key(cache)
        KEPT.append(cache)
        prepared[MEMO] = {key: _reshaped(cache[key], key)}
        try:
            assert [_run(ws) for _ in range(3)] == [(8, 4)] * 3
        finally:
            KEPT.clear()


def test_the_scope_hits_of_two_fronts_read_their_own_caches(hit_path: str) -> None:
    """Scopes of two torch fronts on one buffer (the default front and the inference one,
    whose scope caches lie under two keys of the same dict) alternate: each front's
    requests are served from its own cache (inference tensors from the inference front
    only). Slip: ``scope_cache_of``'s note taken without its key (the other front's cache,
    whose entries answer the same requests, would serve)."""
    torch = pytest.importorskip("torch")
    spec = ((4, 8), torch.float32)
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        fronts = [ws.front("torch"), ws.front("torch", inference=True)]

        def run(front: Any) -> bool:
            with front.scope() as s:
                (view,) = s.get_simultaneous(spec)
            return bool(view.is_inference())

        ws.reserve_bytes(1 << 16)
        for _ in range(2):
            for front in fronts:
                run(front)
        ws.lock()
        seen = [run(front) for _ in range(5) for front in fronts]
    assert seen == [False, True] * 5
