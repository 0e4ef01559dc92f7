"""Which hit path serves a request inside a region (a replayed step's, a scope's):
compiled, or pure Python.

The same two paths as a plain request's (:mod:`arena.views.hit`), one layer up:

* **compiled**: ``arena.planning._region_hit`` (``arena/planning/_region_hit.c``), built
  at install with the views layer's ``arena.views._hit``. Its ``StepHitBase`` serves a
  request index whose views the replay remembered over the slot's current buffer (and a
  ``release`` of one of the last six requests' views, or of one the run indexed already),
  and hands everything else to the step's Python methods; ``CompiledStep`` also builds,
  enters and exits a step in C where the replay is the usual one (locked, nothing else
  open on the slot, at its plan's height), mirroring ``Step._replay_locked`` and
  ``Step._end_replay``. Its ``ScopeHitBase`` serves a request the slot's buffer remembers
  for the front's scopes at the slot's current top, and enters and exits the usual scope.
  It reads the fields of the steps, scopes, runs and books of this layer, and asks the
  layers below through their C-APIs: the views layer's compiled hit for the request
  checks and the fresh views (``arena/views/_hit_api.h``), the slots layer for every
  store into a slot or its region stack (``arena/slots/_slot_api.h``).
* **python**: the same hits written in Python (:class:`arena.planning.steps.Step`,
  :class:`arena.planning.scopes.Scope`) over the bases below, where the extension was not
  built, where the plain hit runs in Python (:data:`arena.views.hit.HIT_PATH`), or when
  ``ARENA_PURE_PYTHON=1`` is set in the environment before arena is imported.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from arena.base.extensions import load_extension
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from arena.slots.stack import RegionStack
from arena.views import hit
from arena.views.prepared import Prepared

__all__ = [
    "WHY_PYTHON",
    "PyScopeHitBase",
    "PyStepHitBase",
    "ScopeHitBase",
    "StepHitBase",
    "compiled",
]


class PyStepHitBase:
    """The pure-Python twin of the compiled ``StepHitBase``: a replayed step's hit
    settings, as slots (see :class:`arena.planning.steps.Step`).

    Attributes
    ----------
    slot
        The slot the step runs on, or None.
    request : int
        The index of the step's next request.
    _caches
        Per request index, ``{specs: Prepared}`` over ``_buffer``; None outside a replay.
    _expiring
        Per request index, the blocks that must be released by then.
    _released, _handed, _ids
        The run's released blocks, and what it handed out: per request a list of its
        views or of the remembered views they are fresh views of, and the addresses of
        the views handed out, in order (:class:`arena.planning.runs.StepRun`).
    _buffer
        The buffer ``_caches`` belongs to.
    _fresh_view
        The per-view fresh-view function, None (hand out the prepared views) or False
        (every request takes the Python path).
    _watch : bool
        Served requests need the front's bookkeeping (a request log while unlocked).
    _probe
        The front's capture probe, or None: asked per request the hit serves, once its
        views are built; True (a CUDA graph being captured) hands the request to the
        step's ``_captured`` (the capture mark).
    _quick : bool
        ``release`` of one view may take the compiled hit (a replay, no poisoning, no
        debug mode).
    _starts
        Per request index of the plan, its first block; empty outside a replay.
    _lasts
        The run's last use per block.
    """

    __slots__ = (
        "_buffer",
        "_caches",
        "_expiring",
        "_fresh_view",
        "_handed",
        "_ids",
        "_lasts",
        "_probe",
        "_quick",
        "_released",
        "_starts",
        "_watch",
        "request",
        "slot",
    )


class PyScopeHitBase:
    """The pure-Python twin of the compiled ``ScopeHitBase``: a scope's region and hit
    settings, as slots (see :class:`arena.planning.scopes.Scope`).

    Attributes
    ----------
    slot
        The slot the region is open on, or None.
    base, end, held : int
        The region's first byte, the end of its highest view, its live bytes.
    _memo : str
        Where the front's scopes remember views in ``Buffer.prepared``: a dict
        ``{(top, specs): Prepared}``.
    _fresh_view
        The per-view fresh-view function, None (hand out the prepared views) or False
        (every request takes the Python path).
    _watch : bool
        Requests need Python's bookkeeping (a request log while unlocked, debug mode,
        poisoning).
    _probe
        The front's capture probe, or None: asked per request the hit serves, once its
        views are built; True (a CUDA graph being captured) hands the request to the
        scope's ``_captured`` (the capture mark).
    """

    __slots__ = ("_fresh_view", "_memo", "_probe", "_watch", "base", "end", "held", "slot")


def _load() -> tuple[ModuleType | None, str]:
    if hit.compiled is None:  # its C-API is the views layer's compiled hit's
        return None, hit.WHY_PYTHON
    module, why = load_extension("arena.planning._region_hit")
    if module is not None:
        module.bind(Slot, RegionStack, Buffer, Prepared, Governor)
    return module, why


#: The compiled extension module, or None where it is not in use; and why not.
compiled, WHY_PYTHON = _load()

if TYPE_CHECKING:
    StepHitBase = PyStepHitBase
    ScopeHitBase = PyScopeHitBase
else:
    #: The base class of :class:`~arena.planning.steps.Step`.
    StepHitBase = compiled.StepHitBase if compiled is not None else PyStepHitBase
    #: The base class of :class:`~arena.planning.scopes.Region` (scopes).
    ScopeHitBase = compiled.ScopeHitBase if compiled is not None else PyScopeHitBase
