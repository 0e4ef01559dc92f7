"""The profile file: its JSON schema, validation, repair, merging, and safe writing.

A profile is one JSON object (``"format": "arena-profile"``, ``"version": 1``)::

    {"format": "arena-profile", "version": 1,
     "device": "cuda", "ubatches": 2, "lanes": 1, "alignment": 256,   # the match key
     "growth": "exact", "runs": 3, "ranks": [0, 1], "world": 2, "updated": "2026-...Z",
     "slots": [{"ubatch": 0, "lane": 0, "peak": ..., "capacity": ..., "growths": ...,
                "load": ..., "planned": ..., "steps": [{"key": "forward", ...}]}],
     "sites": [{"site": "attn.py:88:forward", "ubatch": 0, "lane": 0, "peak": ...,
                "layouts": [{"total": ..., "padding": ..., "views": [[[4, 64], "float16"]]}]}],
     "timeline": [{"t": 0.0012, "ubatch": 0, "lane": 0, "old": 0, "new": ...,
                   "caller": "...", "kind": "grow"}],
     "workspaces": [{"ubatch": 0, "lane": 0, "kind": "library", "key": "flashinfer",
                     "bytes": ...}, {..., "kind": "triton", "key": null, "bytes": ...}]}

``world`` (the number of ranks of the job that wrote it, 1 outside one) is optional, and so
is ``workspaces`` (profiles written before them have none): the largest size of
each library workspace (keys that are a str or an int) and of each slot's Triton blocks.
A slot's ``load`` and ``planned`` are optional too: its LOAD (the most bytes its requests
held live at once) and its planned need (what it needs once its steps are planned; 0
when no run planned a step there). A slot with a planned need presizes to it, others to
the larger of ``peak`` and ``capacity``. A slot's ``steps`` is optional as well: the plan
of each step key (a str or an int) planned there, which a restarted arena replays from the
step's first run (fields in :mod:`arena.observe.profilesteps`).

Merging takes the maximum over runs (and over ranks: every rank of a distributed job may
write the same file); ``runs`` adds up, saturating at :data:`LIMIT`; of a step's plans the
newer run's wins (keys only the older planned stay). Writers resolve
symlinks first (the link stays a link, its target gets the run), take an exclusive
``fcntl.flock`` on ``REALPATH.lock`` (removed again when they are done), re-read the file
under it, merge, write a temporary file in the same directory and ``os.replace`` it over
the file: readers never see half a file and no run's figures are lost.

What a writer does with the file it finds (:func:`write_merged`):

* no file, or an empty one: writes this run's profile;
* a valid profile of the same match key: merges into it;
* a profile of this schema version with fields out of range or entries it cannot use:
  repairs it (:func:`salvage_profile`: counters above :data:`LIMIT` are clamped, invalid
  entries of ``sites``, ``ranks``, ``timeline``, ``workspaces`` and a slot's ``steps`` are
  dropped, an invalid slot figure or ``runs`` counts from 0) and merges into what is left;
* a valid profile of another match key: replaces it (the caller warns);
* anything else (not a regular file, over :data:`MAX_PROFILE_BYTES`, unreadable, not JSON,
  not an arena profile, another schema version, a match key or slot list that cannot be
  read): leaves it as it is and raises :class:`ProfileError`. A file the arena cannot read
  as its own is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from arena.observe.files import FileRefused, exclusive, file_kind, read_regular
from arena.observe.profileschema import (
    FORMAT,
    LIMIT,
    VERSION,
    ProfileError,
    check_profile,
    describe_key,
    describe_repairs,
    key_of,
    one_line,
    salvage_profile,
)
from arena.observe.profilesteps import merge_steps

__all__ = [
    "FORMAT",
    "LIMIT",
    "MAX_LAYOUTS",
    "MAX_PROFILE_BYTES",
    "VERSION",
    "ProfileError",
    "check_profile",
    "describe_key",
    "describe_repairs",
    "key_of",
    "largest_layouts",
    "load_profile",
    "merge_profiles",
    "presize_target",
    "read_profile",
    "salvage_profile",
    "write_atomically",
    "write_merged",
]

#: Distinct layouts kept per (slot, call site): the largest ones.
MAX_LAYOUTS = 8
#: Growth events kept per run.
MAX_TIMELINE = 512
#: The largest profile file read. A real one is kilobytes to a few megabytes; a larger
#: file (or ``/dev/zero``) is refused with a warning instead of filling memory.
MAX_PROFILE_BYTES = 64 << 20


def _read_json(path: str | os.PathLike[str]) -> Any:
    """The parsed JSON at ``path``; None for an empty file (nothing to keep)."""
    try:
        text = read_regular(path, MAX_PROFILE_BYTES, "MAX_PROFILE_BYTES").decode("utf-8")
    except FileNotFoundError:
        raise
    except FileRefused as exc:
        raise ProfileError(str(exc)) from exc
    except (OSError, UnicodeError) as exc:
        raise ProfileError(f"cannot read it ({one_line(exc)})") from exc
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"it is not valid JSON ({one_line(exc)})") from exc
    except RecursionError as exc:
        raise ProfileError(
            f"it is nested too deeply for the JSON parser ({one_line(exc)})"
        ) from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ProfileError(f"the JSON parser refused it ({one_line(exc)})") from exc
    except Exception as exc:  # never let a profile stop the engine
        raise ProfileError(
            f"the JSON parser failed on it ({type(exc).__name__}: {one_line(exc)})"
        ) from exc


def _checked(check: Any, data: Any) -> Any:
    """``check(data)``, with anything unexpected it raises as a :class:`ProfileError`."""
    try:
        return check(data)
    except ProfileError:
        raise
    except Exception as exc:  # a check that trips: a bad profile
        raise ProfileError(
            f"it could not be checked ({type(exc).__name__}: {one_line(exc)})"
        ) from exc


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and validate the profile at ``path``, as it is (nothing repaired).

    Only a regular file of at most :data:`MAX_PROFILE_BYTES` is read: a FIFO, a device or
    a directory is refused without blocking or reading.

    Parameters
    ----------
    path
        The profile file.

    Returns
    -------
    dict
        The profile, checked by :func:`check_profile`.

    Raises
    ------
    FileNotFoundError
        If there is no file.
    ProfileError
        With the reason, when it cannot be read or is not a valid profile. Anything the
        parser or the checks raise (``ValueError`` for an integer of more digits than
        Python converts, ``RecursionError`` for deep nesting, or any other exception)
        becomes a ``ProfileError``: a profile never stops the engine.
    """
    data = _read_json(path)
    if data is None:
        raise ProfileError("it is empty")
    return _checked(check_profile, data)  # type: ignore[no-any-return]


def load_profile(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The profile at ``path``, repaired where it can be (:func:`salvage_profile`).

    Returns
    -------
    tuple or None
        ``(profile, notes)``: a valid profile and what was repaired (empty when nothing
        was); None when there is no file or it is empty.

    Raises
    ------
    ProfileError
        When the file is not a profile this arena can read or repair: leave it alone.
    """
    try:
        data = _read_json(path)
    except FileNotFoundError:
        return None
    if data is None:
        return None
    return _checked(salvage_profile, data)  # type: ignore[no-any-return]


def _layout_key(layout: dict[str, Any]) -> str:
    return json.dumps(layout["views"], sort_keys=True)


def largest_layouts(layouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The :data:`MAX_LAYOUTS` largest distinct layouts, largest first."""
    distinct: dict[str, dict[str, Any]] = {}
    for layout in layouts:
        distinct.setdefault(_layout_key(layout), layout)
    ordered = sorted(distinct.values(), key=lambda lay: (-lay["total"], _layout_key(lay)))
    return ordered[:MAX_LAYOUTS]


def merge_profiles(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` merged into ``old`` (same key): maxima of every figure, runs added (at
    most :data:`LIMIT`).

    A slot's planned need is the maximum of what each side would presize to once either
    side has one: a side without a plan there counts with the larger of its peak and its
    capacity, so a run that planned no step never presizes below what another run used.
    Of a slot's stored step plans, ``new``'s plan of a key wins; keys only ``old`` planned
    stay.
    """
    merged = dict(new)
    slots = []
    raised = False
    for before, now in zip(old["slots"], new["slots"], strict=True):
        slot = dict(now)
        for name in ("peak", "capacity", "growths"):
            slot[name] = max(before[name], now[name])
        slot["load"] = max(before.get("load", 0), now.get("load", 0))
        planned = before.get("planned", 0) or now.get("planned", 0)
        slot["planned"] = max(presize_target(before), presize_target(now)) if planned else 0
        raised = raised or now["peak"] > before["peak"] or now["capacity"] > before["capacity"]
        if "steps" in before or "steps" in now:
            slot["steps"] = merge_steps(before.get("steps", []), now.get("steps", []))
        slots.append(slot)
    merged["slots"] = slots
    sites: dict[tuple[str, int, int], dict[str, Any]] = {}
    for site in [*old["sites"], *new["sites"]]:
        key = (site["site"], site["ubatch"], site["lane"])
        if key not in sites:
            sites[key] = dict(site)
            continue
        entry = sites[key]
        entry["peak"] = max(entry["peak"], site["peak"])
        entry["layouts"] = largest_layouts([*entry["layouts"], *site["layouts"]])
    merged["sites"] = sorted(sites.values(), key=lambda s: (s["ubatch"], s["lane"], -s["peak"]))
    # The timeline shown is the warm-up of the run that last raised a size.
    if not raised and old["timeline"]:
        merged["timeline"] = old["timeline"]
    workspaces: dict[str, dict[str, Any]] = {}
    for entry in [*old.get("workspaces", []), *new.get("workspaces", [])]:
        ident = json.dumps([entry["ubatch"], entry["lane"], entry["kind"], entry["key"]])
        kept = workspaces.setdefault(ident, dict(entry))
        kept["bytes"] = max(kept["bytes"], entry["bytes"])
    merged["workspaces"] = list(workspaces.values())
    merged["runs"] = min(LIMIT, old["runs"] + new["runs"])  # saturate: the reader's maximum
    merged["ranks"] = sorted(set(old["ranks"]) | set(new["ranks"]))
    worlds = [p["world"] for p in (old, new) if "world" in p]
    if worlds:
        merged["world"] = max(worlds)
    return merged


def presize_target(slot: dict[str, Any]) -> int:
    """The bytes a profile's slot entry presizes to: its planned need when a run planned
    steps there (the first, recording run of a step grows the slot past its plan, so its
    capacity overstates the need), else the larger of its peak request and its capacity.
    """
    return int(slot.get("planned", 0)) or max(slot["peak"], slot["capacity"])


def write_merged(path: str | os.PathLike[str], run: dict[str, Any]) -> str | None:
    """Merge ``run`` into the profile at ``path`` under the lock, atomically.

    ``path`` is resolved first: a symlink stays a link and its target gets the run, and
    writers through the link and through the real path take the same lock. See the
    module's docstring for what happens to the file found there.

    Returns
    -------
    str or None
        What changed beyond a merge, for a warning: the file was replaced (it was
        recorded for another configuration) or repaired; None otherwise.

    Raises
    ------
    ProfileError
        When the file is not a profile this arena may merge into or replace: it is left
        as it is, and the reason says why.
    OSError
        When the file cannot be written (the caller warns).
    """
    target = Path(os.path.realpath(path))
    try:  # before the lock: no lock file is made beside /dev/zero
        kind = os.stat(target).st_mode
    except FileNotFoundError:
        kind = stat.S_IFREG
    if not stat.S_ISREG(kind):
        raise ProfileError(f"it is {file_kind(kind)}, not a regular file")
    return exclusive(target.with_name(target.name + ".lock"), partial(_merge_into, target, run))


def _merge_into(target: Path, run: dict[str, Any]) -> str | None:
    """:func:`write_merged` under the lock: merge ``run`` into the profile at the real
    path ``target`` and write it atomically; what changed beyond a merge, or None."""
    note: str | None = None
    found = load_profile(target)
    if found is None:
        merged = run
    else:
        existing, repairs = found
        if repairs:
            note = f"it was repaired first: {describe_repairs(repairs)}"
        if key_of(existing) == key_of(run):
            merged = merge_profiles(existing, run)
        else:
            note = (
                f"it was recorded for {describe_key(key_of(existing))}, so this run's "
                "profile replaced it"
            )
            merged = run
    merged = {**merged, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        check_profile(merged)
    except ProfileError as exc:  # a bug here: never write what the reader refuses
        raise RuntimeError(f"the merged profile fails its own check: {exc}") from exc
    write_atomically(target, merged)
    return note


def write_atomically(target: Path, profile: dict[str, Any]) -> None:
    """Replace ``target`` with ``profile`` as JSON in one step: written to a temporary
    file beside it, flushed to disk, then renamed over it (a reader sees the old file or
    the new one, never half of one). Call with the profile's lock held."""
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(profile, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
