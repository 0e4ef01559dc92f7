"""Bounded caches of prepared views, evicted by recency and in part.

A cache is a plain dict (lookups stay one C call on the hot path) whose entries are
:data:`~arena.slot.Prepared` lists carrying a *used* flag. A hit sets the flag; when the
cache is full, the oldest eighth is swept as a CLOCK: entries used since the last sweep
get a second chance (moved to the back, flag cleared), the others are dropped. So a
working set that fits is never evicted wholesale, and cyclic access over more layouts
than fit keeps most of them instead of none.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

__all__ = ["SERVE", "USED", "remember"]

#: Index of the *used* flag in a prepared entry.
USED = 3
#: Index of the entry's server: ``serve(specs)`` -> fresh views or None (see
#: :func:`arena.plan.server`).
SERVE = 4


def remember(cache: dict[Any, Any], key: Any, entry: Any, limit: int) -> None:
    """Insert ``entry`` under ``key``, sweeping the oldest part first when full.

    Entries that are not :data:`~arena.slot.Prepared` lists (a front's set of layouts
    seen once) have no *used* flag: the sweep simply drops the oldest of them.

    Unhashable keys are not cached. Safe against a concurrent sweep of the same cache
    (two threads on one slot): keys that vanished are skipped.
    """
    if len(cache) >= limit:
        chunk = max(1, limit // 8)
        for old in list(islice(cache, chunk)):
            found = cache.pop(old, None)
            if found.__class__ is list and found[USED]:
                found[USED] = False
                cache[old] = found
        # Whatever the flags said, free a whole chunk: the next sweep is `chunk` inserts
        # away, so a sweep costs O(1) per insert.
        while len(cache) > limit - chunk:
            try:
                del cache[next(iter(cache))]
            except (KeyError, StopIteration, RuntimeError):
                break
    try:
        cache[key] = entry
    except TypeError:  # unhashable but valid (e.g. list shapes)
        pass
