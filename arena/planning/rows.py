"""A replayed step's cache list: per request index, the dict of views the replay
remembered there (:func:`arena.planning.replay.remembering`), and, on the compiled path,
one row per request index beside it, which the compiled step hit
(``arena/planning/_region_hit.c``) reads instead of the dict, its entry, the views list and
the view (``arena/planning/_step_rows.h``).

A step of 128 requests has 128 request indices, each with objects of its own that a
replay reads cold; a plain request repeated 128 times reads one entry. The rows keep
what a request index's hit reads in one array, consecutive in memory, so a replay reads
them in order. They change which memory is read, never what a request is served: the hit
takes a row only while the request index's dict is the one noted, unchanged since.

Where ``arena.planning._rows`` is not built, or the compiled step hit is not in use
(``arena.planning._region_hit`` not loaded: :data:`arena.planning.region_hit.compiled`;
``ARENA_PURE_PYTHON`` set), the cache list is a plain list, and :func:`note_row` does
nothing: the pure-Python hit reads the dicts, as the compiled one does where a row is
stale.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from arena.base.extensions import load_extension
from arena.planning import region_hit

__all__ = ["WHY_PYTHON", "compiled", "new_caches", "note_row"]


def _load() -> tuple[ModuleType | None, str]:
    if region_hit.compiled is None:  # no compiled step hit to read the rows
        return None, region_hit.WHY_PYTHON
    module, why = load_extension("arena.planning._rows")
    if module is not None:
        # The compiled step hit reads the rows of cache lists of this type (and only those).
        region_hit.compiled.bind_rows(module.StepCaches)
    return module, why


#: The compiled module, or None where it is not in use; and why not.
compiled, WHY_PYTHON = _load()


def new_caches(requests: int) -> list[dict[Any, Any]]:
    """A step's cache list of ``requests`` empty dicts: a ``StepCaches`` (a list with its
    rows) where the extension is in use, else a list."""
    empty: list[dict[Any, Any]] = [{} for _ in range(requests)]
    if compiled is None:
        return empty
    caches: list[dict[Any, Any]] = compiled.StepCaches(empty)
    return caches


def note_row(caches: list[dict[Any, Any]], r: int) -> bool:
    """Note request index ``r``'s row of ``caches`` from ``caches[r]`` (after the replay
    remembered its views there): whether the compiled step hit has a row for it now (one
    plain one-view request remembered there); False on the pure-Python path."""
    if compiled is None or type(caches) is list:
        return False
    return bool(compiled.note(caches, r))
