"""Which hit path serves a request seen before: compiled, or pure Python.

A *hit* is a request the front served before on the same slot buffer: one dictionary
lookup, a check that every dimension is a plain ``int``, and one fresh view per tensor.
Two implementations serve it, with the same results:

* **compiled**: ``arena.views._hit``, a small C extension (CPython's API, no NumPy or
  torch headers: its NumPy ``Planner`` finds NumPy's C-API table at run time) built at
  install where a C compiler is found. Its ``HitBase`` is the
  base class of :class:`~arena.front.Front`, and its ``get_simultaneous`` and
  ``try_get_simultaneous`` serve a plain hit without running Python code: the slot (its
  ``Binding`` holds each thread's micro-batch in the thread state), the lookup, the
  exact-int check, one ``fresh_view`` call per view (torch's ``t.data`` through the
  attribute's getter), and, while unlocked, the request
  log's note when the call site is already known. Everything else (debug mode, a miss, a
  dimension that is not an exact ``int``, capture marking, a new call site or peak) is
  handed to the front's Python methods, so each guarantee is written once, in Python.
* **python**: the same hit written in Python (:meth:`~arena.front.Front.get_simultaneous`),
  the fallback where the extension was not built, or when ``ARENA_PURE_PYTHON=1`` is set
  in the environment before arena is imported.

A replayed step's request and a scope's request have the same two paths, one layer up
(:mod:`arena.planning.region_hit`): their compiled hits ask this one's, through its C-API
(``arena/views/_hit_api.h``, the capsule ``arena.views._hit._C_API``), for the request
checks and the fresh views.

``python -m arena --version`` names the one in use (:func:`arena._version.active_hit_path`).
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import TYPE_CHECKING

from arena.base.events import RequestLog, caller_memos
from arena.base.extensions import load_extension
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from arena.slots.stack import RegionStack
from arena.views.prepared import Prepared

__all__ = [
    "HIT_PATH",
    "WHY_PYTHON",
    "Binding",
    "HitBase",
    "PyBinding",
    "PyHitBase",
    "compiled",
]


class PyHitBase:
    """The pure-Python twin of the compiled ``HitBase``: the same hit settings, as slots.

    Attributes
    ----------
    _select : callable
        ``_select()`` -> the caller's slot.
    _slots, _tls
        The compiled path's shortcut to the slot: the slots and the selector's per-thread
        micro-batch binding where one lane and no resolver make ``slots[tls.ubatch]`` the
        answer (``_tls`` None and one slot: that slot); ``_slots`` None otherwise.
    _key : str
        The front's key into ``Buffer.prepared``.
    _fresh_view
        The per-view function that makes a fresh view, None to hand out the prepared
        views themselves (cached fronts), False when every request takes the Python path.
    _debug : bool
        Every request takes the checked Python path.
    _probe, _log, _governor
        The capture probe (or None), the request log (or None) and the governor.
    _builder : ViewBuilder
        Serves what the hit does not (``miss``) and the bookkeeping off the locked hot
        path (``served``).
    """

    __slots__ = (
        "_builder",
        "_debug",
        "_fresh_view",
        "_governor",
        "_key",
        "_log",
        "_probe",
        "_select",
        "_slots",
        "_tls",
    )


class PyBinding(threading.local):
    """The pure-Python per-thread micro-batch binding: ``ubatch`` is the calling thread's
    (the class attribute is every thread's default)."""

    ubatch = 0


def _load() -> tuple[ModuleType | None, str]:
    module, why = load_extension("arena.views._hit")
    if module is not None:
        module.bind(Slot, RegionStack, Buffer, Prepared, Governor, RequestLog, *caller_memos())
    return module, why


#: The compiled extension module, or None where it is not in use; and why not.
compiled, WHY_PYTHON = _load()

#: ``"compiled"`` or ``"python"``: the hit path new fronts use.
HIT_PATH = "compiled" if compiled is not None else "python"

if TYPE_CHECKING:
    HitBase = PyHitBase
    Binding = PyBinding
else:
    #: The base class of :class:`~arena.front.Front`.
    HitBase = compiled.HitBase if compiled is not None else PyHitBase
    #: The per-thread micro-batch binding of :class:`~arena.slots.selector.SlotSelector`
    #: (the compiled path reads the compiled one without an attribute lookup).
    Binding = compiled.Binding if compiled is not None else PyBinding
