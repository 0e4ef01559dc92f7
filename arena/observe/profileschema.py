"""The profile's JSON schema: validation (:func:`check_profile`) and repair
(:func:`salvage_profile`). Reading, merging and writing are in :mod:`arena.observe.profilefile`,
which documents the format and re-exports these names.
"""

from __future__ import annotations

import math
from typing import Any

from arena.base.layout import int_not_bool
from arena.errors import ArenaError
from arena.observe.profilesteps import step_ident, step_problem

__all__ = [
    "FORMAT",
    "LIMIT",
    "OPTIONAL_SLOT_FIGURES",
    "VERSION",
    "ProfileError",
    "check_profile",
    "describe_key",
    "describe_repairs",
    "key_of",
    "one_line",
    "salvage_profile",
]

FORMAT = "arena-profile"
VERSION = 1
#: The largest figure a profile may hold: what a buffer can address. Counters saturate here.
LIMIT = 2**63 - 1
_KEY = ("device", "ubatches", "lanes", "alignment")
_EVENT_KEYS = ("t", "ubatch", "lane", "old", "new", "caller", "kind")


class ProfileError(ArenaError, ValueError):
    """A profile file is unreadable, malformed, or of another schema version."""


def key_of(profile: dict[str, Any]) -> tuple[Any, ...]:
    """What a profile must share with an arena to presize it: device kind, ubatches,
    lanes, alignment and the arena's name (None for an unnamed arena)."""
    return (*(profile[k] for k in _KEY), profile.get("name"))


def describe_key(key: tuple[Any, ...]) -> str:
    """``"device cuda, 2 ubatches, 1 lanes, alignment 256"`` (and ``", name 'x'"``)."""
    device, ubatches, lanes, alignment, *name = key
    named = f", name {name[0]!r}" if name and name[0] is not None else ""
    return f"device {device}, {ubatches} ubatches, {lanes} lanes, alignment {alignment}{named}"


def describe_repairs(notes: list[str], shown: int = 5) -> str:
    """The first ``shown`` notes of :func:`salvage_profile`, and how many more."""
    text = "; ".join(notes[:shown])
    return text if len(notes) <= shown else f"{text}; and {len(notes) - shown} more"


def one_line(value: object) -> str:
    """``str(value)`` on one line, at most 200 characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _show(value: Any) -> str:
    """``repr(value)``, shortened for a message."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, where: str, low: int = 0) -> int:
    if not int_not_bool(value) or not low <= value <= LIMIT:
        raise ProfileError(f"{where} must be an int from {low} to 2**63 - 1, found {_show(value)}")
    return value


def _index(value: Any, where: str, count: int, what: str) -> int:
    _int(value, where)
    if value >= count:
        raise ProfileError(
            f"{where} is {value}, but the profile has {count} {what} (0 to {count - 1})"
        )
    return int(value)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ProfileError(f"{where} must be a list, found {_show(value)}")
    return value


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProfileError(f"{where} must be an object, found {_show(value)}")
    return value


def _check_views(views: Any, where: str) -> None:
    """Views are ``[[shape ints >= 0], "dtype name"]`` pairs."""
    for view in _list(views, f"{where} 'views'"):
        if (
            not isinstance(view, list)
            or len(view) != 2
            or not isinstance(view[0], list)
            or not isinstance(view[1], str)
            or [d for d in view[0] if not (int_not_bool(d) and d >= 0)]
        ):
            raise ProfileError(
                f"{where} 'views' must hold [[dims >= 0], \"dtype\"] pairs, found {_show(view)}"
            )


def _check_head(data: Any) -> tuple[int, int]:
    """Format, version, match key, ``runs`` and the optional strings; ``(ubatches, lanes)``."""
    _check_kind(data)
    if not isinstance(data.get("device"), str):
        raise ProfileError(f'"device" must be a string, found {_show(data.get("device"))}')
    for name in ("growth", "updated", "name"):
        if name in data and not isinstance(data[name], str):
            raise ProfileError(f'"{name}" must be a string, found {_show(data[name])}')
    ubatches = _int(data.get("ubatches"), '"ubatches"', 1)
    lanes = _int(data.get("lanes"), '"lanes"', 1)
    alignment = _int(data.get("alignment"), '"alignment"', 1)
    if alignment & (alignment - 1):
        raise ProfileError(f'"alignment" must be a power of two, found {alignment}')
    _int(data.get("runs"), '"runs"')
    return ubatches, lanes


def _check_kind(data: Any) -> dict[str, Any]:
    """``data`` if it is an arena profile of this schema version: anything else is not
    ours to touch."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f'it is not an arena profile (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ProfileError(
            f"it has schema version {_show(data.get('version'))}; "
            f"this arena reads version {VERSION}"
        )
    return data


def _check_slot_list(data: dict[str, Any], ubatches: int, lanes: int) -> list[Any]:
    slots = _list(data.get("slots"), '"slots"')
    count = ubatches * lanes
    if len(slots) != count:
        raise ProfileError(
            f'"slots" must list {count} slots ({ubatches} ubatches x {lanes} lanes), '
            f"found {len(slots)}"
        )
    for i, slot in enumerate(slots):
        _dict(slot, f"slot #{i}")
        for name in ("ubatch", "lane"):
            _int(slot.get(name), f"slot #{i} {name!r}")
        expected = (i // lanes, i % lanes)
        if (slot["ubatch"], slot["lane"]) != expected:
            raise ProfileError(
                f"slot #{i} must be ubatch {expected[0]}, lane {expected[1]} (one slot per "
                f"(ubatch, lane), ubatch-major), found ubatch {slot['ubatch']}, "
                f"lane {slot['lane']}"
            )
    return slots


_SLOT_FIGURES = ("peak", "capacity", "growths")
#: Slot figures profiles written before scopes and steps lack: LOAD and the planned need.
OPTIONAL_SLOT_FIGURES = ("load", "planned")


def _check_layout(layout: Any, where: str) -> None:
    """``where`` names the layout: ``call site #0 layout``."""
    _dict(layout, where)
    _int(layout.get("total"), f"{where} 'total'")
    _int(layout.get("padding"), f"{where} 'padding'")
    _check_views(layout.get("views"), where)


def _check_site(i: int, site: Any, ubatches: int, lanes: int) -> None:
    if not isinstance(site, dict) or not isinstance(site.get("site"), str):
        raise ProfileError(
            f'call site #{i} must be an object with a "site" string, found {_show(site)}'
        )
    _index(site.get("ubatch"), f"call site #{i} 'ubatch'", ubatches, "ubatches")
    _index(site.get("lane"), f"call site #{i} 'lane'", lanes, "lanes")
    _int(site.get("peak"), f"call site #{i} 'peak'")
    for layout in _list(site.get("layouts"), f"call site #{i} 'layouts'"):
        _check_layout(layout, f"call site #{i} layout")


def _check_rank(i: int, rank: Any) -> None:
    if not int_not_bool(rank):
        raise ProfileError(f'"ranks" #{i} must be an int, found {_show(rank)}')


def _check_event(i: int, event: Any, ubatches: int, lanes: int) -> None:
    where = f"timeline entry #{i}"
    missing = [k for k in _EVENT_KEYS if k not in _dict(event, where)]
    if missing:
        raise ProfileError(
            f"{where} lacks {', '.join(map(repr, missing))} (every entry needs "
            f"{', '.join(map(repr, _EVENT_KEYS))}), found {_show(event)}"
        )
    t = event["t"]
    if not (int_not_bool(t) or isinstance(t, float)) or not 0 <= t <= LIMIT or not math.isfinite(t):
        raise ProfileError(f"{where} 't' must be a finite number of seconds >= 0, found {_show(t)}")
    _index(event.get("ubatch"), f"{where} 'ubatch'", ubatches, "ubatches")
    _index(event.get("lane"), f"{where} 'lane'", lanes, "lanes")
    for name in ("old", "new"):
        _int(event.get(name), f"{where} {name!r}")
    for name in ("caller", "kind"):
        if not isinstance(event.get(name), str):
            raise ProfileError(f"{where} {name!r} must be a string, found {_show(event.get(name))}")


_WORKSPACE_KINDS = ("library", "triton")


def _check_workspace(i: int, entry: Any, ubatches: int, lanes: int) -> None:
    """``{"ubatch", "lane", "kind", "key", "bytes"}``: a library workspace (``key`` a str
    or an int) or a slot's Triton blocks (``key`` null)."""
    where = f"workspace #{i}"
    _dict(entry, where)
    _index(entry.get("ubatch"), f"{where} 'ubatch'", ubatches, "ubatches")
    _index(entry.get("lane"), f"{where} 'lane'", lanes, "lanes")
    _int(entry.get("bytes"), f"{where} 'bytes'")
    kind, key = entry.get("kind"), entry.get("key")
    if kind not in _WORKSPACE_KINDS:
        raise ProfileError(f"{where} 'kind' must be 'library' or 'triton', found {_show(kind)}")
    if kind == "triton" and key is not None:
        raise ProfileError(f"{where} 'key' must be null for Triton blocks, found {_show(key)}")
    if kind == "library" and not (isinstance(key, str) or int_not_bool(key)):
        raise ProfileError(f"{where} 'key' must be a string or an int, found {_show(key)}")


def _check_step(i: int, j: int, entry: Any, alignment: int, seen: set[Any]) -> dict[str, Any]:
    """Step entry ``j`` of slot ``i`` (:func:`~arena.observe.profilesteps.step_problem`);
    ``seen``: the keys of the slot's entries before it."""
    where = f"slot #{i} step #{j}"
    problem = step_problem(entry, alignment, LIMIT)
    if problem is not None:
        raise ProfileError(f"{where} {problem}")
    ident = step_ident(entry["key"])
    if ident in seen:
        raise ProfileError(f"{where} repeats the key {_show(entry['key'])} of an earlier step")
    seen.add(ident)
    return dict(entry)


def check_profile(data: Any) -> dict[str, Any]:
    """``data`` if it is a valid profile of this schema version.

    Every field is checked for its type and value: the match key (``ubatches`` and
    ``lanes`` >= 1, ``alignment`` >= 1), ``runs`` an int >= 0, ``ranks`` a list of ints,
    one slot per (ubatch, lane) in ubatch-major order, call sites and timeline entries
    inside those slots, sizes ints from 0 to :data:`LIMIT`; the optional ``workspaces``
    (library workspaces and Triton blocks per slot) and slot figures ``load`` and
    ``planned`` likewise, and a slot's optional ``steps`` (stored step plans, one per key:
    every list as long as it must be, every block aligned, inside the plan and apart from
    the blocks live with it; see :func:`~arena.observe.profilesteps.step_problem`). What
    passes can be merged, presized from, restored and reported on without further checks.

    Parameters
    ----------
    data
        Parsed JSON.

    Returns
    -------
    dict
        ``data`` itself.

    Raises
    ------
    ProfileError
        Naming the first problem found, with the value found.
    """
    profile = _check_kind(data)
    ubatches, lanes = _check_head(profile)
    for i, slot in enumerate(_check_slot_list(profile, ubatches, lanes)):
        for name in _SLOT_FIGURES:
            _int(slot.get(name), f"slot #{i} {name!r}")
        for name in OPTIONAL_SLOT_FIGURES:
            if name in slot:
                _int(slot[name], f"slot #{i} {name!r}")
        seen: set[Any] = set()  # optional: profiles written before stored plans lack it
        for j, entry in enumerate(_list(slot.get("steps", []), f"slot #{i} 'steps'")):
            _check_step(i, j, entry, profile["alignment"], seen)
    for i, site in enumerate(_list(profile.get("sites"), '"sites"')):
        _check_site(i, site, ubatches, lanes)
    for i, rank in enumerate(_list(profile.get("ranks"), '"ranks"')):
        _check_rank(i, rank)
    if "world" in profile:  # optional: profiles written before it lack it
        _int(profile["world"], '"world"', 1)
    for i, event in enumerate(_list(profile.get("timeline"), '"timeline"')):
        _check_event(i, event, ubatches, lanes)
    # Optional: profiles written before library workspaces and Triton blocks lack it.
    for i, entry in enumerate(_list(profile.get("workspaces", []), '"workspaces"')):
        _check_workspace(i, entry, ubatches, lanes)
    return profile


class _Repair:
    """What :func:`salvage_profile` changed, as notes for a warning."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def clamp(self, entry: dict[str, Any], name: str, where: str) -> None:
        """Saturate ``entry[name]`` at :data:`LIMIT` (what the reader accepts)."""
        value = entry.get(name)
        if int_not_bool(value) and value > LIMIT:
            entry[name] = LIMIT
            self.notes.append(f"{where} {_show(value)} clamped to 2**63 - 1")

    def figure(self, entry: dict[str, Any], name: str, where: str) -> None:
        """A counter: clamped when too large, counted from 0 when not a count at all."""
        self.clamp(entry, name, where)
        try:
            _int(entry.get(name), where)
        except ProfileError as exc:
            entry[name] = 0
            self.notes.append(f"{exc}: counted from 0")

    def steps(self, i: int, value: Any, alignment: int) -> list[Any]:
        """Slot ``i``'s stored step plans that pass the check (others dropped)."""
        if not isinstance(value, list):
            self.notes.append(f"slot #{i} 'steps' must be a list, found {_show(value)}: dropped")
            return []
        seen: set[Any] = set()
        return self.entries(
            {"steps": value}, "steps", lambda j, entry: _check_step(i, j, entry, alignment, seen)
        )

    def entries(self, data: dict[str, Any], name: str, keep: Any) -> list[Any]:
        """The entries of list ``data[name]`` that ``keep(i, entry)`` returns (others
        raise :class:`ProfileError`: dropped, with the reason)."""
        value = data.get(name, [])
        if not isinstance(value, list):
            self.notes.append(f'"{name}" must be a list, found {_show(value)}: dropped')
            return []
        kept = []
        for i, entry in enumerate(value):
            try:
                kept.append(keep(i, entry))
            except ProfileError as exc:
                self.notes.append(f"{exc}: dropped")
        return kept


def salvage_profile(data: Any) -> tuple[dict[str, Any], list[str]]:
    """A valid profile from ``data``, keeping all the history that can be kept.

    Counters above :data:`LIMIT` (``runs``, slot and call-site figures, layout sizes,
    timeline sizes) are clamped to it; a ``runs`` or slot figure that is not a count
    counts from 0 (a ``planned`` of 0 presizes from the capacity instead); an invalid
    entry of ``sites`` (or a layout of one), ``ranks``, ``timeline``, ``workspaces`` or a
    slot's ``steps`` (a stored step plan: that step records again) is dropped; an invalid
    ``growth`` or ``updated`` is dropped. Nothing else is changed: what cannot be
    repaired raises.

    Returns
    -------
    tuple
        ``(profile, notes)``: a new dict that passes :func:`check_profile` (``data`` is
        not modified) and one note per repair.

    Raises
    ------
    ProfileError
        When ``data`` is not an arena profile of this schema version, or its match key or
        slot list is invalid: there is no history this arena can tell apart from noise.
    """
    _check_kind(data)
    repair = _Repair()
    profile = dict(data)
    for name in ("growth", "updated"):
        if name in profile and not isinstance(profile[name], str):
            repair.notes.append(f'"{name}" {_show(profile.pop(name))} is not a string: dropped')
    repair.figure(profile, "runs", '"runs"')
    ubatches, lanes = _check_head(profile)
    slots = [dict(slot) for slot in _check_slot_list(profile, ubatches, lanes)]
    for i, slot in enumerate(slots):
        for name in _SLOT_FIGURES:
            repair.figure(slot, name, f"slot #{i} {name!r}")
        for name in OPTIONAL_SLOT_FIGURES:
            if name in slot:  # 0 is "not recorded": presizing falls back to the capacity
                repair.figure(slot, name, f"slot #{i} {name!r}")
        if "steps" in slot:  # a plan dropped: that step records again after a restart
            slot["steps"] = repair.steps(i, slot["steps"], profile["alignment"])
    profile["slots"] = slots

    def site(i: int, entry: Any) -> dict[str, Any]:
        found = dict(_dict(entry, f"call site #{i}"))
        repair.clamp(found, "peak", f"call site #{i} 'peak'")
        if isinstance(found.get("layouts"), list):
            found["layouts"] = repair.entries(found, "layouts", layout_of(i))
        _check_site(i, found, ubatches, lanes)
        return found

    def layout_of(site_index: int) -> Any:
        def layout(j: int, entry: Any) -> dict[str, Any]:
            where = f"call site #{site_index} layout #{j}"
            found = dict(_dict(entry, where))
            for name in ("total", "padding"):
                repair.clamp(found, name, f"{where} {name!r}")
            _check_layout(found, where)
            return found

        return layout

    def event(i: int, entry: Any) -> dict[str, Any]:
        found = dict(_dict(entry, f"timeline entry #{i}"))
        for name in ("old", "new"):
            repair.clamp(found, name, f"timeline entry #{i} {name!r}")
        _check_event(i, found, ubatches, lanes)
        return found

    def rank(i: int, entry: Any) -> int:
        _check_rank(i, entry)
        return int(entry)

    def workspace(i: int, entry: Any) -> dict[str, Any]:
        found = dict(_dict(entry, f"workspace #{i}"))
        repair.clamp(found, "bytes", f"workspace #{i} 'bytes'")
        _check_workspace(i, found, ubatches, lanes)
        return found

    if "workspaces" in profile:
        profile["workspaces"] = repair.entries(profile, "workspaces", workspace)
    profile["sites"] = repair.entries(profile, "sites", site)
    profile["ranks"] = repair.entries(profile, "ranks", rank)
    if "world" in profile and (
        not int_not_bool(profile["world"]) or not 1 <= profile["world"] <= LIMIT
    ):
        repair.notes.append(f'"world" {_show(profile.pop("world"))} is not a count: dropped')
    profile["timeline"] = repair.entries(profile, "timeline", event)
    return check_profile(profile), repair.notes
