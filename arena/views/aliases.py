"""Arrays that stand for a view: what ``write_into`` returns in its place.

JAX arrays are immutable, so a front's ``write_into(view, value)`` returns a new array
over the view's bytes rather than the view. A step's ``release()`` takes that array for
the view: :func:`note_alias` records which view it was written through and
:func:`origin_of` follows the record back. Identity, not addresses: a stale array over
bytes that a later request now holds must never stand for that later view.

Both ends are held weakly, so the record keeps nothing alive; a record whose array is
gone is ignored (its id may be reused) and dropped at the next purge.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from arena.forks import after_fork

__all__ = ["note_alias", "origin_of"]


class _Aliases:
    """id(array) -> (weak array, weak view), purged of dead records as it grows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[int, tuple[weakref.ref[Any], weakref.ref[Any]]] = {}
        self.purge_at = 64

    def reset(self) -> None:
        self.lock = threading.Lock()


_ALIASES = _Aliases()
after_fork(_ALIASES, _Aliases.reset)


def note_alias(alias: Any, view: Any) -> None:
    """Record that ``alias`` (a new array over ``view``'s bytes) stands for ``view``."""
    if alias is view:
        return
    try:
        record = (weakref.ref(alias), weakref.ref(view))
    except TypeError:  # not weakly referable: not recorded (release() names it)
        return
    aliases = _ALIASES
    with aliases.lock:
        records = aliases.records
        records[id(alias)] = record
        if len(records) >= aliases.purge_at:
            for key, (array, _) in list(records.items()):
                if array() is None:
                    del records[key]
            aliases.purge_at = max(64, 2 * len(records))


def origin_of(obj: Any) -> Any:
    """The view ``obj`` was written through (following aliases of aliases), or ``obj``."""
    records = _ALIASES.records
    for _ in range(64):  # a chain of write_into results; never a cycle (ids are live)
        record = records.get(id(obj))
        if record is None or record[0]() is not obj:
            return obj
        view = record[1]()
        if view is None:
            return obj
        obj = view
    return obj
