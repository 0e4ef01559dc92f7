"""Profiles: record the sizes of one run, presize the next one from them.

``Arena(profile=PATH)`` (or ``ARENA_PROFILE=PATH`` for arenas made without the argument,
process-wide ones included):

* at construction, when ``PATH`` holds a profile of the same device kind, ubatches, lanes
  and alignment, every slot is presized from it with one allocation (each slot of a lane
  to the largest size recorded in that lane, under the arena's growth policy: a slot's
  planned need where steps were planned, see
  :func:`~arena.observe.profilefile.presize_target`), and each slot gets the stored plans
  of its steps (:mod:`~arena.observe.profilesteps`): their first run replays the plan. A
  restarted engine does not grow and ``lock()`` has nothing to size. A profile for another
  configuration warns (:class:`~arena.ArenaWarning`, with the reason) and is ignored; the
  run's own profile replaces it later. A profile with fields out of range or entries this
  arena cannot use is repaired (warned) and presizes from what is left. Anything else at
  ``PATH`` (a FIFO, a device, a directory, a file that is not a profile of this schema
  version) warns, is never read past its type or
  :data:`~arena.observe.profilefile.MAX_PROFILE_BYTES` and is never overwritten: the
  arena runs unsized and saves no profile there. Nothing here stops the engine.
* while unlocked, the arena records per slot and per call site the peak bytes and the
  :data:`~arena.observe.profilefile.MAX_LAYOUTS` largest distinct layouts, and the capacity
  timeline (every resize, with the call site that caused it). Locked requests record
  nothing: recording rides on the unlocked call-site bookkeeping. At every save it also
  reads each slot's LOAD, planned need and step plans (:mod:`arena.planning.plan`,
  :mod:`arena.planning.records`).
* on ``lock()``, on ``close()``, when the arena is garbage collected and at interpreter
  exit (a ``weakref.finalize`` on the arena; the recorder holds no reference to it), the
  record is merged into ``PATH`` (see :mod:`arena.observe.profilefile`).

The recorder sees the arena only through what it is given: the slot table, to presize,
to listen and to read its figures (held weakly), and :meth:`Recorder.note` calls from the
arena's request log.

``python -m arena report PATH`` shows a profile (:mod:`arena.observe.report`).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena.base.events import ArenaEvent, warn_user
from arena.base.layout import compute_layout, int_not_bool
from arena.errors import ArenaError
from arena.forks import after_fork
from arena.observe.profilefile import (
    FORMAT,
    LIMIT,
    MAX_LAYOUTS,
    MAX_TIMELINE,
    VERSION,
    ProfileError,
    describe_key,
    describe_repairs,
    key_of,
    load_profile,
    presize_target,
    write_merged,
)
from arena.observe.profilesteps import step_ident, step_problem
from arena.observe.ranks import process_rank, world_size
from arena.planning.books import restore_step_plans, step_plans
from arena.planning.plan import plan_figures
from arena.slots.table import SlotTable
from arena.slots.workspaces import presize_workspace

__all__ = ["Recorder", "attach_profile", "profile_from_env"]


def profile_from_env(variable: str = "ARENA_PROFILE") -> str | None:
    """The profile path named by the environment variable, or None."""
    value = os.environ.get(variable, "").strip()
    return value or None


@dataclass
class _Site:
    """What one call site asked of one slot."""

    peak: int = 0
    #: layout -> (total, padding, views as JSON-ready lists)
    layouts: dict[Any, dict[str, Any]] = field(default_factory=dict)
    smallest: int = 0


class Recorder:
    """Records one arena's sizes while it is unlocked and merges them into a profile.

    Obtain one through :func:`attach_profile`; the arena's request log calls :meth:`note`
    on unlocked requests, and :meth:`on_event` hears of resizes, locks and closes.

    Parameters
    ----------
    path : Path
        The profile file.
    key : tuple
        ``(device kind, ubatches, lanes, alignment, name)``: what a profile must match.
    growth : str
        The arena's growth policy, recorded for the report.
    """

    def __init__(self, path: Path, key: tuple[Any, ...], growth: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        after_fork(self, Recorder._renew)
        _, ubatches, lanes, self._alignment, self._name = key
        self._lanes = lanes
        self._growth = growth
        self.key = key
        count = ubatches * lanes
        self.peaks = [0] * count
        self.capacities = [0] * count
        self.growths = [0] * count
        self.sites: dict[tuple[int, str], _Site] = {}
        self.timeline: list[dict[str, Any]] = []
        #: (ubatch, lane, kind, key) -> the largest bytes seen.
        self.workspaces: dict[tuple[int, int, str, Any], int] = {}
        #: Per slot: the largest LOAD and planned need read from the slots (see watch()).
        self.loads = [0] * count
        self.planned = [0] * count
        #: Per slot: the newest plan of each step key read from the slots.
        self.steps: list[dict[Any, dict[str, Any]]] = [{} for _ in range(count)]
        self._figures: weakref.ref[Any] | None = None
        self._start = time.monotonic()
        self.warned = False
        self.dirty = False
        self.saved = False
        #: The last write failure warned of (the same failure again is not warned twice).
        self.failed = ""

    def _renew(self) -> None:
        self._mutex = threading.Lock()

    # ------------------------------------------------------------------ recording
    def watch(self, slots: SlotTable) -> None:
        """Read LOAD and the planned need from ``slots`` at every save. Held weakly: the
        slots' listeners hold this recorder, and a strong reference back would make a
        cycle that keeps every buffer alive until the cycle collector runs."""
        self._figures = weakref.ref(slots)

    def _refresh(self) -> None:
        """Take the slots' current LOAD and planned need (the largest seen this run)."""
        slots = None if self._figures is None else self._figures()
        if slots is None:  # the arena is gone: its last figures were read at its last save
            return
        figures, plans = plan_figures(slots), step_plans(slots)
        with self._mutex:
            for index, (load, planned) in enumerate(figures):
                if load > self.loads[index] or planned > self.planned[index]:
                    self.loads[index] = max(self.loads[index], load)
                    self.planned[index] = max(self.planned[index], planned)
                    self.dirty = True
            for kept, entries in zip(self.steps, plans, strict=True):
                for entry in entries:  # a book a step changed as it was read: kept if valid
                    ident, bad = step_ident(entry["key"]), step_problem
                    if kept.get(ident) != entry and not bad(entry, self._alignment, LIMIT):
                        kept[ident] = entry
                        self.dirty = True

    def note(self, site: str, index: int, specs: Any, required: int) -> None:
        """An unlocked request of ``required`` bytes from ``site`` in slot ``index``."""
        record = self.sites.get((index, site))
        if record is not None and required <= record.peak:
            if len(record.layouts) >= MAX_LAYOUTS and required <= record.smallest:
                return
            try:
                if specs in record.layouts:
                    return
            except TypeError:  # unhashable specs: compare layouts below
                pass
        layout = compute_layout(specs, self._alignment)
        with self._mutex:
            record = self.sites.setdefault((index, site), _Site())
            self.peaks[index] = max(self.peaks[index], required)
            record.peak = max(record.peak, required)
            try:
                hash(specs)
                key: Any = specs
            except TypeError:
                key = layout
            if key in record.layouts:
                return
            record.layouts[key] = {
                "total": layout.total,
                "padding": layout.total - sum(v.nbytes for v in layout.views),
                "views": [[list(v.shape), v.dtype.name] for v in layout.views],
            }
            if len(record.layouts) > MAX_LAYOUTS:
                smallest = min(record.layouts, key=lambda k: record.layouts[k]["total"])
                del record.layouts[smallest]
            record.smallest = min(entry["total"] for entry in record.layouts.values())
            self.dirty = True

    def on_event(self, event: ArenaEvent) -> None:
        """Listener: resizes go into the timeline; lock and close save the profile."""
        if event.kind == "resize" and event.slot is not None:
            self.resized(event.slot, event.old_bytes, event.new_bytes, event.caller, "grow")
        elif event.kind in ("workspace", "triton") and event.slot is not None:
            self.workspace(event.slot, event.kind, event.key, event.new_bytes)
        elif event.kind in ("lock", "close"):
            self.save()

    def workspace(self, slot: tuple[int, int], kind: str, key: Any, nbytes: int) -> None:
        """A library workspace (``kind`` ``"workspace"`` or ``"library"``) or a Triton block
        of slot ``slot`` holds ``nbytes``. Library keys other than a str or an int cannot
        be written to JSON and read back as themselves: they are not recorded. Triton
        blocks are recorded per slot (stream handles change from run to run)."""
        if kind == "triton":
            key = None
        elif not (isinstance(key, str) or int_not_bool(key)):
            return
        else:
            kind = "library"
        entry = (*slot, kind, key)
        with self._mutex:
            if self.workspaces.get(entry, -1) < nbytes:
                self.workspaces[entry] = nbytes
                self.dirty = True

    def resized(self, slot: tuple[int, int], old: int, new: int, caller: str, kind: str) -> None:
        """A slot's capacity changed from ``old`` to ``new`` bytes."""
        ubatch, lane = slot
        index = ubatch * self._lanes + lane
        with self._mutex:
            self.capacities[index] = max(self.capacities[index], new)
            self.growths[index] += 1
            if len(self.timeline) < MAX_TIMELINE:
                self.timeline.append(
                    {
                        "t": round(time.monotonic() - self._start, 6),
                        "ubatch": ubatch,
                        "lane": lane,
                        "old": old,
                        "new": new,
                        "caller": caller,
                        "kind": kind,
                    }
                )
            self.dirty = True

    # ------------------------------------------------------------------ saving
    def snapshot(self) -> dict[str, Any]:
        """This run's record as a profile (not merged with the file)."""
        device, ubatches, lanes, alignment, _ = self.key
        self._refresh()
        with self._mutex:
            slots = [
                {
                    "ubatch": i // lanes,
                    "lane": i % lanes,
                    "peak": self.peaks[i],
                    "capacity": self.capacities[i],
                    "growths": self.growths[i],
                    "load": self.loads[i],
                    "planned": self.planned[i],
                    "steps": list(self.steps[i].values()),
                }
                for i in range(ubatches * lanes)
            ]
            sites = [
                {
                    "site": site,
                    "ubatch": index // lanes,
                    "lane": index % lanes,
                    "peak": record.peak,
                    "layouts": sorted(record.layouts.values(), key=lambda lay: -lay["total"]),
                }
                for (index, site), record in sorted(self.sites.items())
            ]
            timeline = list(self.timeline)
            workspaces = [
                {"ubatch": ub, "lane": lane, "kind": kind, "key": key, "bytes": nbytes}
                for (ub, lane, kind, key), nbytes in self.workspaces.items()
            ]
        return {
            "format": FORMAT,
            "version": VERSION,
            "device": device,
            "ubatches": ubatches,
            "lanes": lanes,
            "alignment": alignment,
            "growth": self._growth,
            **({} if self._name is None else {"name": self._name}),
            # A run counts once, however often it saves.
            "runs": 0 if self.saved else 1,
            "ranks": [process_rank()],
            "world": world_size(),
            "slots": slots,
            "sites": sites,
            "timeline": timeline,
            "workspaces": workspaces,
        }

    def save(self) -> bool:
        """Merge this run into the profile file; warn (never raise) when that fails.

        An unwritable file, or any unexpected exception while merging or writing, is an
        :class:`~arena.ArenaWarning` with the reason: ``lock()``, ``close()`` and the exit
        hook never raise because of the profile.

        Returns
        -------
        bool
            Whether the file was written.
        """
        try:
            run = self.snapshot()
            self.dirty = False
            changed = write_merged(self.path, run)
        except ProfileError as exc:  # not a profile this arena may touch: left as it is
            if not self.warned:
                self.warned = True
                warn_user(
                    f"arena profile {str(self.path)!r} is left as it is and this run is not "
                    f"saved: {exc}. {_MOVE_IT}"
                )
            return False
        except OSError as exc:  # the next lock/close tries again; the same failure warns once
            folder = self.path.parent
            reason = (
                f"its folder {str(folder)!r} does not exist"
                if not folder.is_dir()
                else f"{exc.strerror or exc}"
            )
            message = _cannot_write(self.path, reason)
            if message != self.failed:
                self.failed = message
                warn_user(message)
            return False
        except Exception as exc:  # lock(), close() and the exit hook must not raise
            self.dirty = False
            warn_user(
                f"cannot save the arena profile {str(self.path)!r} "
                f"({type(exc).__name__}: {exc}); the engine continues, but the next start "
                "will not be presized. Delete or move the file so the next run writes a "
                "fresh one"
            )
            return False
        self.saved = True
        if changed is not None and not self.warned:
            self.warned = True
            warn_user(f"arena profile {str(self.path)!r} was saved, but {changed}")
        return True

    def save_if_dirty(self) -> None:
        """For the finalizer: save when something was recorded since the last save."""
        self._refresh()
        if self.dirty:
            self.save()


_MOVE_IT = (
    "The arena runs unsized and never overwrites a file it cannot read as its own "
    "profile: move or delete it, or pass another path as profile= (or ARENA_PROFILE)"
)


def _cannot_write(path: Path, reason: str) -> str:
    """The warning of a profile that cannot be written, for ``reason``."""
    return (
        f"cannot write the arena profile {str(path)!r} ({reason}); the engine continues, "
        "but the next start will not be presized. Pass a writable path as profile= (or "
        "ARENA_PROFILE)"
    )


def attach_profile(path: Any, slots: SlotTable, key: tuple[Any, ...], growth: str) -> Recorder:
    """Presize ``slots`` from the profile at ``path`` (when it matches ``key``) and record
    into it.

    Called once by :class:`~arena.Arena` at construction, before any request; the arena
    saves the record when it is garbage collected or the interpreter exits.
    """
    recorder = Recorder(Path(os.fspath(path)), key, growth)
    profile = _load_matching(recorder)
    if profile is not None:
        _presize(slots, recorder, profile)
    folder = recorder.path.parent
    if not folder.is_dir():  # said at Arena(...), not first at lock() or at exit (a
        # finalizer's warning names weakref.py); save() does not say it again
        recorder.failed = _cannot_write(recorder.path, f"its folder {str(folder)!r} does not exist")
        warn_user(recorder.failed)
    recorder.watch(slots)
    slots.add_listener(recorder.on_event)
    return recorder


def _load_matching(recorder: Recorder) -> dict[str, Any] | None:
    path = recorder.path
    what = f"arena profile {str(path)!r}"
    try:
        found = load_profile(path)
    except ProfileError as exc:
        reason = f"{what} is ignored and left as it is: {exc}. {_MOVE_IT}"
    else:
        if found is None:
            return None
        profile, repairs = found
        if key_of(profile) == recorder.key:
            if repairs:
                recorder.warned = True
                warn_user(
                    f"{what} was repaired: {describe_repairs(repairs)}. The rest presizes "
                    "this arena; lock() or close() saves the repaired profile with this run"
                )
            return profile
        reason = (
            f"{what} is ignored: it was recorded for {describe_key(key_of(profile))}, "
            f"this arena has {describe_key(recorder.key)}. The arena starts unsized and "
            "this run's profile replaces the file at lock() or close()"
        )
    recorder.warned = True
    warn_user(reason)
    return None


def _presize(slots: SlotTable, recorder: Recorder, profile: dict[str, Any]) -> None:
    """One allocation per slot: each lane's slots to the largest size recorded there
    (:func:`presize_target` per slot)."""
    lanes = recorder.key[2]
    for lane in range(lanes):
        recorded = [s for s in profile["slots"] if s["lane"] == lane]
        target = max((presize_target(s) for s in recorded), default=0)
        try:
            if target:
                slots.reserve(target, lane)
        except ArenaError as exc:  # out of memory: run unsized rather than not at all
            warn_user(
                f"arena profile {str(recorder.path)!r}: could not presize lane {lane} to "
                f"{target} bytes ({exc}); those slots start unsized and grow on demand"
            )
    for entry in profile.get("workspaces", []):
        where = (entry["ubatch"], entry["lane"])
        try:
            slot = slots.slots[where[0] * slots.lanes + where[1]]
            presize_workspace(slot, entry["kind"], entry["key"], entry["bytes"])
        except ArenaError as exc:
            warn_user(
                f"arena profile {str(recorder.path)!r}: could not presize the {entry['kind']} "
                f"workspace {entry['key']!r} of slot {where} to {entry['bytes']} bytes ({exc}); "
                "it grows on demand"
            )
            continue
        recorder.workspace(where, entry["kind"], entry["key"], entry["bytes"])
    refused = restore_step_plans(slots, [s.get("steps", []) for s in profile["slots"]])
    if refused:
        where, key, need, capacity = refused[0]
        warn_user(
            f"arena profile {str(recorder.path)!r}: {len(refused)} step plan(s) reach past "
            f"their slot (step {key!r} of slot {where} needs {need} bytes, the slot holds "
            f"{capacity}); those steps record again"
        )
    for index, capacity in enumerate(slots.sizes()):
        if capacity:
            recorder.resized(divmod(index, lanes), 0, capacity, "profile", "presize")
    recorder.dirty = False
