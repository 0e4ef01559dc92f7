"""Plant round 47 on the bounded view cache's sweep (:func:`arena.views.prepared.remember`):
a CLOCK gives an entry used since the last sweep a second chance and clears its flag, so
an entry not used again loses at its next turn. A sweep that spared the entry but left the
flag set kept a request served once, long ago, in the cache for good, at the cost of
requests in use now."""

from __future__ import annotations

from typing import Any

from arena.views.prepared import Prepared, remember


def test_a_second_chance_is_spent_by_an_entry_not_used_again() -> None:
    cache: dict[Any, Prepared] = {}
    for key in range(64):
        entry = Prepared(0, [])
        entry.used = key < 8  # keys 0..7 were used before the first sweep
        remember(cache, key, entry, 64)
    remember(cache, "first", Prepared(0, []), 64)
    assert all(key in cache for key in range(8))  # spared once...
    assert not [key for key in range(8) if cache[key].used]  # ...their flags cleared
    for n in range(200):  # cold requests, never used: every entry comes round again
        remember(cache, ("cold", n), Prepared(0, []), 64)
    assert not [key for key in range(8) if key in cache]  # not used again: swept
    assert len(cache) <= 64
