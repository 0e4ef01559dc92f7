"""Profiles: record the sizes of one run, presize the next one from them.

``Arena(profile=PATH)`` (or ``ARENA_PROFILE=PATH`` for arenas made without the argument,
process-wide ones included):

* at construction, when ``PATH`` holds a profile of the same device kind, ubatches, lanes
  and alignment, every slot is presized from it with one allocation (each slot of a lane
  to the largest size recorded in that lane, under the arena's growth policy), so a
  restarted engine does not grow and ``lock()`` has nothing to size. A profile for another
  configuration warns (:class:`~arena.ArenaWarning`, with the reason) and is ignored; the
  run's own profile replaces it later. A profile with fields out of range or entries this
  arena cannot use is repaired (warned) and presizes from what is left. Anything else at
  ``PATH`` (a FIFO, a device, a directory, a file that is not a profile of this schema
  version) warns, is never read past its type or :data:`~arena.profilefile.MAX_PROFILE_BYTES`
  and is never overwritten: the arena runs unsized and saves no profile there. Nothing here
  stops the engine.
* while unlocked, the arena records per slot and per call site the peak bytes and the
  :data:`~arena.profilefile.MAX_LAYOUTS` largest distinct layouts, and the capacity
  timeline (every resize, with the call site that caused it). Locked requests record
  nothing: recording rides on the unlocked call-site bookkeeping.
* on ``lock()``, on ``close()``, when the arena is garbage collected and at interpreter
  exit (a ``weakref.finalize``: the recorder holds only a weak reference to the arena),
  the record is merged into ``PATH`` (see :mod:`arena.profilefile`).

``python -m arena report PATH`` shows a profile (:mod:`arena.report`).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ArenaError, ArenaWarning
from .layout import compute_layout
from .observe import ArenaEvent
from .profilefile import (
    FORMAT,
    MAX_LAYOUTS,
    MAX_TIMELINE,
    VERSION,
    ProfileError,
    describe_key,
    describe_repairs,
    key_of,
    load_profile,
    write_merged,
)

if TYPE_CHECKING:
    from .core import Arena
    from .governor import Governor
    from .slot import Slot

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

    Obtain one through :func:`attach_profile`; the arena calls :meth:`note` (from its
    unlocked call-site bookkeeping) and :meth:`on_event` (as a listener).
    """

    def __init__(self, arena: Arena, governor: Governor, path: Path) -> None:
        self.path = path
        self._arena = weakref.ref(arena)
        self._governor = governor
        self._lanes = arena.lanes
        self.key = (arena.device.kind, arena.ubatches, arena.lanes, arena.alignment)
        count = arena.ubatches * arena.lanes
        self.peaks = [0] * count
        self.capacities = [0] * count
        self.growths = [0] * count
        self.sites: dict[tuple[int, str], _Site] = {}
        self.timeline: list[dict[str, Any]] = []
        self._start = time.monotonic()
        self.warned = False
        self.dirty = False
        self.saved = False

    # ------------------------------------------------------------------ recording
    def note(self, site: str, slot: Slot, specs: Any, required: int) -> None:
        """An unlocked request of ``required`` bytes from ``site`` in ``slot``."""
        record = self.sites.get((slot.index, site))
        if record is not None and required <= record.peak:
            if len(record.layouts) >= MAX_LAYOUTS and required <= record.smallest:
                return
            try:
                if specs in record.layouts:
                    return
            except TypeError:  # unhashable specs: compare layouts below
                pass
        layout = compute_layout(specs, self._governor.alignment)
        with self._governor.mutex:
            record = self.sites.setdefault((slot.index, site), _Site())
            self.peaks[slot.index] = max(self.peaks[slot.index], required)
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
        elif event.kind in ("lock", "close"):
            self.save()

    def resized(self, slot: tuple[int, int], old: int, new: int, caller: str, kind: str) -> None:
        """A slot's capacity changed from ``old`` to ``new`` bytes."""
        ubatch, lane = slot
        index = ubatch * self._lanes + lane
        with self._governor.mutex:
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
        device, ubatches, lanes, alignment = self.key
        with self._governor.mutex:
            slots = [
                {
                    "ubatch": i // lanes,
                    "lane": i % lanes,
                    "peak": self.peaks[i],
                    "capacity": self.capacities[i],
                    "growths": self.growths[i],
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
        return {
            "format": FORMAT,
            "version": VERSION,
            "device": device,
            "ubatches": ubatches,
            "lanes": lanes,
            "alignment": alignment,
            "growth": str(self._governor.growth),
            # A run counts once, however often it saves.
            "runs": 0 if self.saved else 1,
            "ranks": [_rank()],
            "slots": slots,
            "sites": sites,
            "timeline": timeline,
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
                warnings.warn(
                    f"arena profile {str(self.path)!r} is left as it is and this run is not "
                    f"saved: {exc}. {_MOVE_IT}",
                    ArenaWarning,
                    stacklevel=2,
                )
            return False
        except OSError as exc:  # warned once per attempt; the next lock/close tries again
            warnings.warn(
                f"cannot write the arena profile {str(self.path)!r} ({exc}); the engine "
                "continues, but the next start will not be presized. Pass a writable path "
                "as profile= (or ARENA_PROFILE)",
                ArenaWarning,
                stacklevel=2,
            )
            return False
        except Exception as exc:  # lock(), close() and the exit hook must not raise
            self.dirty = False
            warnings.warn(
                f"cannot save the arena profile {str(self.path)!r} "
                f"({type(exc).__name__}: {exc}); the engine continues, but the next start "
                "will not be presized. Delete or move the file so the next run writes a "
                "fresh one",
                ArenaWarning,
                stacklevel=2,
            )
            return False
        self.saved = True
        if changed is not None and not self.warned:
            self.warned = True
            warnings.warn(
                f"arena profile {str(self.path)!r} was saved, but {changed}",
                ArenaWarning,
                stacklevel=2,
            )
        return True

    def save_if_dirty(self) -> None:
        """For the finalizer: save when something was recorded since the last save."""
        if self.dirty:
            self.save()


_MOVE_IT = (
    "The arena runs unsized and never overwrites a file it cannot read as its own "
    "profile: move or delete it, or pass another path as profile= (or ARENA_PROFILE)"
)


def _rank() -> int:
    """This process's rank: torch.distributed's when initialised, else ``RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except (RuntimeError, ValueError):
            pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def attach_profile(arena: Arena, governor: Governor, path: Any) -> Recorder:
    """Presize ``arena`` from the profile at ``path`` (when it matches) and record into it.

    Called once by :class:`~arena.Arena` at construction, before any request.
    """
    recorder = Recorder(arena, governor, Path(os.fspath(path)))
    profile = _load_matching(recorder)
    if profile is not None:
        _presize(arena, recorder, profile)
    governor.recorder = recorder
    arena.add_listener(recorder.on_event)
    weakref.finalize(arena, recorder.save_if_dirty)
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
                warnings.warn(
                    f"{what} was repaired: {describe_repairs(repairs)}. The rest presizes "
                    "this arena; lock() or close() saves the repaired profile with this run",
                    ArenaWarning,
                    stacklevel=4,
                )
            return profile
        reason = (
            f"{what} is ignored: it was recorded for {describe_key(key_of(profile))}, "
            f"this arena has {describe_key(recorder.key)}. The arena starts unsized and "
            "this run's profile replaces the file at lock() or close()"
        )
    recorder.warned = True
    warnings.warn(reason, ArenaWarning, stacklevel=4)
    return None


def _presize(arena: Arena, recorder: Recorder, profile: dict[str, Any]) -> None:
    """One allocation per slot: each lane's slots to the largest size recorded there."""
    lanes = arena.lanes
    for lane in range(lanes):
        recorded = [s for s in profile["slots"] if s["lane"] == lane]
        target = max((max(s["peak"], s["capacity"]) for s in recorded), default=0)
        try:
            if target:
                arena.reserve_bytes(target, lane=lane)
        except ArenaError as exc:  # out of memory: run unsized rather than not at all
            warnings.warn(
                f"arena profile {str(recorder.path)!r}: could not presize lane {lane} to "
                f"{target} bytes ({exc}); those slots start unsized and grow on demand",
                ArenaWarning,
                stacklevel=4,
            )
    for slot_stats in arena.stats().slots:
        if slot_stats.capacity:
            where = (slot_stats.ubatch, slot_stats.lane)
            recorder.resized(where, 0, slot_stats.capacity, "profile", "presize")
    recorder.dirty = False
