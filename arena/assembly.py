"""How an :class:`~arena.Arena` is put together from its validated settings.

:func:`assemble` builds the parts an arena composes: the slot table (with its governor,
ledger and event log), the selector that finds the caller's slot, the profile recorder
and the request log. :class:`Fronts` makes each framework's front on first use. The arena
keeps the parts and adds only its public methods.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from arena.base.events import RequestLog, format_mb
from arena.config import (
    Settings,
    check_framework,
    check_name,
    check_path,
    load_adapter,
    pick_framework,
)
from arena.front import Front, front_class
from arena.kernels.library import LibraryWorkspaces
from arena.kernels.memstats import PeakHook
from arena.observe.profile import Recorder, attach_profile, profile_from_env
from arena.observe.profilepaths import claim_profile_path
from arena.observe.snapshot import EventLog
from arena.planning.plan import StepPlanHook
from arena.slots.persistent import PersistentHook
from arena.slots.selector import SlotSelector
from arena.slots.table import SlotTable
from arena.slots.workspaces import WorkspaceHook
from arena.views.hit import Binding

__all__ = ["Fronts", "Parts", "assemble", "close_when_collected"]

_arena_ids = itertools.count()


class Fronts:
    """An arena's fronts, one per ``(framework, cached, inference)``, each made on first
    use.

    Parameters
    ----------
    table : SlotTable
        The arena's slots.
    selector : SlotSelector
        Finds the caller's slot.
    config : Settings
        The arena's settings (view cache size, poisoning).
    log : RequestLog or None
        Told of every unlocked request (None: call-site tracking is off).
    """

    __slots__ = ("_config", "_fronts", "_log", "_selector", "_table")

    def __init__(
        self,
        table: SlotTable,
        selector: SlotSelector,
        config: Settings,
        log: RequestLog | None,
    ) -> None:
        self._table = table
        self._selector = selector
        self._config = config
        self._log = log
        self._fronts: dict[tuple[str, bool, bool], Front[Any]] = {}

    def get(
        self, owner: object, framework: str, cached: bool, inference: bool = False
    ) -> Front[Any]:
        """The front of ``framework`` for ``owner`` (the arena, held weakly by the front);
        with ``inference``, the torch front of inference tensors (checked by the caller,
        :func:`arena.config.check_inference`).

        Raises
        ------
        ConfigError
            If ``framework`` is not one an arena knows.
        FrameworkUnavailableError
            If the framework is not installed or cannot view this device's memory.
        """
        front = self._fronts.get((framework, cached, inference))
        if front is None:
            check_framework(framework)
            config = self._config
            front = front_class()(
                owner,
                self._selector.select,
                self._table,
                load_adapter(framework, self._table.governor.device, inference),
                cached=cached,
                max_cached=config.max_cached,
                poison=config.poison,
                log=self._log,
                shortcut=self._selector.shortcut,
            )
            front = self._fronts.setdefault((framework, cached, inference), front)
        return front


@dataclass(slots=True)
class Parts:
    """What an arena is made of (see :func:`assemble`)."""

    table: SlotTable
    selector: SlotSelector
    fronts: Fronts
    framework: str
    recorder: Recorder | None
    log: RequestLog | None
    workspaces: LibraryWorkspaces


def assemble(
    config: Settings,
    *,
    framework: str | None,
    profile: Any,
    event_log: Any,
    name: Any,
    alloc_context: Callable[[], AbstractContextManager[Any]] | None,
    ubatch_resolver: Callable[[], int] | None,
    lane_resolver: Callable[[], int] | None,
) -> Parts:
    """Build an arena's parts from its validated settings.

    The profile (``profile``; else, unless it is False, a file of this arena's own
    beside ``ARENA_PROFILE``: :mod:`arena.observe.profilepaths`) presizes the slots here,
    before any request. Profiles record requests through the call-site log: with
    ``track_call_sites=False`` a profile keeps capacities only.

    Raises
    ------
    ConfigError
        For a bad path or framework.
    """
    event_log = check_path("event_log", event_log)
    name = check_name(name)
    profile_argument = profile
    profile = None if profile is False else check_path("profile", profile)
    table = SlotTable(config, alloc_context, None if event_log is None else EventLog(event_log))
    # The features that take part in sizing and lock(): persistent buffers and workspace
    # blocks give each slot a store and share a lane's blocks, step plans size each lane,
    # the peaks of memory_stats() watch every allocation.
    table.add_hook(PersistentHook())
    table.add_hook(WorkspaceHook())
    table.add_hook(StepPlanHook())
    table.add_hook(PeakHook())
    selector = SlotSelector(
        table.slots,
        lanes=config.lanes,
        ubatch_resolver=ubatch_resolver,
        lane_resolver=lane_resolver,
        name=f"arena_lane_{next(_arena_ids)}",
        binding=Binding,
    )
    chosen = pick_framework(framework, table.governor.device)
    key = (table.governor.device.kind, config.ubatches, config.lanes, config.alignment, name)
    if profile is None and profile_argument is None:  # ARENA_PROFILE: a file per arena
        shared = profile_from_env()
        profile = None if shared is None else claim_profile_path(shared, key, table)
    recorder = None
    if profile is not None:
        recorder = attach_profile(profile, table, key, str(config.growth))
    log = RequestLog(recorder) if config.track_sites else None
    fronts = Fronts(table, selector, config, log)
    # An arena of inference views hands out its torch library workspaces as inference
    # tensors too.
    workspaces = LibraryWorkspaces(table, selector.select, chosen, config.inference_for(chosen))
    return Parts(table, selector, fronts, chosen, recorder, log, workspaces)


def close_when_collected(
    arena: object, table: SlotTable, recorder: Recorder | None = None
) -> weakref.finalize[..., Any]:
    """Close ``table`` when ``arena`` is garbage collected; returns the finalizer, for
    :meth:`~arena.Arena.close` to detach. ``recorder`` (the arena's profile) is saved
    then and at exit, if something was recorded since its last save (a finalizer of its
    own, holding the recorder, never the arena).

    A front holds its arena weakly and its table strongly: without this, a front that
    outlives its arena (``Arena(...).torch``) would keep allocating on a table nobody can
    close. Closed, the table releases its blocks (views keep their own memory alive) and
    the front raises :class:`~arena.ArenaClosedError` naming the fix. The finalizer holds
    the table weakly, never the arena: a listener, resolver or persistent resource that
    refers to the arena cannot make the arena immortal through it. When the table is
    garbage with the arena (such a cycle), the finalizer releases every block still live
    through what it holds of the ledger: the blocks and the memory source (a source that
    refers to the arena would keep it alive). Not run at exit: the device may be gone by
    then.
    """
    leftovers = table.governor.ledger.leftovers()
    finalizer = weakref.finalize(arena, _close_collected, weakref.ref(table), leftovers)
    finalizer.atexit = False
    if recorder is not None:
        weakref.finalize(arena, recorder.save_if_dirty)
    return finalizer


def _close_collected(table: weakref.ref[SlotTable], leftovers: Callable[[], None]) -> None:
    alive = table()
    if alive is not None:
        alive.close(collected=True)
    else:  # garbage with the arena (a cycle through a listener, a callback, a resource):
        leftovers()  # its blocks still go back to their source, each once


def describe_arena(arena: Any, table: SlotTable, framework: str) -> str:
    """``Arena(device='cpu', ubatches=1, ..., unlocked, slots=[0.00 MB])``: an arena's
    repr, from its public settings, its framework and its slot table."""
    governor = table.governor
    state = "closed" if governor.closed else ("locked" if governor.locked else "unlocked")
    if governor.asleep and not governor.closed:
        state += f", asleep (level {governor.asleep})"
    sizes = ", ".join(format_mb(c) for c in table.sizes())
    named = "" if arena.name is None else f", name={arena.name!r}"
    return (
        f"Arena(device='{arena.device}', ubatches={arena.ubatches}, lanes={arena.lanes}, "
        f"alignment={arena.alignment}, framework='{framework}'{named}, {state}, "
        f"slots=[{sizes}])"
    )
