"""The profile file: its JSON schema, validation, merging, and safe concurrent writing.

A profile is one JSON object (``"format": "arena-profile"``, ``"version": 1``)::

    {"format": "arena-profile", "version": 1,
     "device": "cuda", "ubatches": 2, "lanes": 1, "alignment": 256,   # the match key
     "growth": "exact", "runs": 3, "ranks": [0, 1], "updated": "2026-...Z",
     "slots": [{"ubatch": 0, "lane": 0, "peak": ..., "capacity": ..., "growths": ...}],
     "sites": [{"site": "attn.py:88:forward", "ubatch": 0, "lane": 0, "peak": ...,
                "layouts": [{"total": ..., "padding": ..., "views": [[[4, 64], "float16"]]}]}],
     "timeline": [{"t": 0.0012, "ubatch": 0, "lane": 0, "old": 0, "new": ...,
                   "caller": "...", "kind": "grow"}]}

Merging takes the maximum over runs (and over ranks: every rank of a distributed job may
write the same file). Writers take an exclusive ``fcntl.flock`` on ``PATH.lock``, re-read
the file under it, merge, write a temporary file in the same directory and
``os.replace`` it over ``PATH``: readers never see half a file and no run's figures are
lost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arena.errors import ArenaError

__all__ = [
    "FORMAT",
    "MAX_LAYOUTS",
    "VERSION",
    "ProfileError",
    "check_profile",
    "describe_key",
    "key_of",
    "largest_layouts",
    "merge_profiles",
    "read_profile",
    "write_merged",
]

FORMAT = "arena-profile"
VERSION = 1
#: Distinct layouts kept per (slot, call site): the largest ones.
MAX_LAYOUTS = 8
#: Growth events kept per run.
MAX_TIMELINE = 512
_KEY = ("device", "ubatches", "lanes", "alignment")
_EVENT_KEYS = ("t", "ubatch", "lane", "old", "new", "caller", "kind")


class ProfileError(ArenaError, ValueError):
    """A profile file is unreadable, malformed, or of another schema version."""


def key_of(profile: dict[str, Any]) -> tuple[Any, ...]:
    """What a profile must share with an arena to presize it: device kind, ubatches,
    lanes and alignment."""
    return tuple(profile[k] for k in _KEY)


def describe_key(key: tuple[Any, ...]) -> str:
    """``"device cuda, 2 ubatches, 1 lanes, alignment 256"``."""
    device, ubatches, lanes, alignment = key
    return f"device {device}, {ubatches} ubatches, {lanes} lanes, alignment {alignment}"


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and validate the profile at ``path``.

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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeError) as exc:
        raise ProfileError(f"cannot read it ({_one_line(exc)})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"it is not valid JSON ({_one_line(exc)})") from exc
    except RecursionError as exc:
        raise ProfileError(
            f"it is nested too deeply for the JSON parser ({_one_line(exc)})"
        ) from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ProfileError(f"the JSON parser refused it ({_one_line(exc)})") from exc
    except Exception as exc:  # never let a profile stop the engine
        raise ProfileError(
            f"the JSON parser failed on it ({type(exc).__name__}: {_one_line(exc)})"
        ) from exc
    try:
        return check_profile(data)
    except ProfileError:
        raise
    except Exception as exc:  # a check that trips: a bad profile
        raise ProfileError(
            f"it could not be checked ({type(exc).__name__}: {_one_line(exc)})"
        ) from exc


def _one_line(value: object) -> str:
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


#: The largest figure a profile may hold: what a buffer can address.
_LIMIT = 2**63 - 1


def _int(value: Any, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _LIMIT:
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
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in view[0])
        ):
            raise ProfileError(
                f"{where} 'views' must hold [[dims >= 0], \"dtype\"] pairs, found {_show(view)}"
            )


def check_profile(data: Any) -> dict[str, Any]:
    """``data`` if it is a valid profile of this schema version.

    Every field is checked for its type and value: the match key (``ubatches`` and
    ``lanes`` >= 1, ``alignment`` >= 1), ``runs`` an int >= 0, ``ranks`` a list of ints,
    one slot per (ubatch, lane) in ubatch-major order, call sites and timeline entries
    inside those slots, sizes ints >= 0. What passes can be merged, presized from and
    reported on without further checks.

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
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f'it is not an arena profile (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ProfileError(
            f"it has schema version {_show(data.get('version'))}; "
            f"this arena reads version {VERSION}"
        )
    if not isinstance(data.get("device"), str):
        raise ProfileError(f'"device" must be a string, found {_show(data.get("device"))}')
    for name in ("growth", "updated"):
        if name in data and not isinstance(data[name], str):
            raise ProfileError(f'"{name}" must be a string, found {_show(data[name])}')
    ubatches = _int(data.get("ubatches"), '"ubatches"', 1)
    lanes = _int(data.get("lanes"), '"lanes"', 1)
    _int(data.get("alignment"), '"alignment"', 1)
    _int(data.get("runs"), '"runs"')
    slots = _list(data.get("slots"), '"slots"')
    count = ubatches * lanes
    if len(slots) != count:
        raise ProfileError(
            f'"slots" must list {count} slots ({ubatches} ubatches x {lanes} lanes), '
            f"found {len(slots)}"
        )
    for i, slot in enumerate(slots):
        _dict(slot, f"slot #{i}")
        for name in ("ubatch", "lane", "peak", "capacity", "growths"):
            _int(slot.get(name), f"slot #{i} {name!r}")
        expected = (i // lanes, i % lanes)
        if (slot["ubatch"], slot["lane"]) != expected:
            raise ProfileError(
                f"slot #{i} must be ubatch {expected[0]}, lane {expected[1]} (one slot per "
                f"(ubatch, lane), ubatch-major), found ubatch {slot['ubatch']}, "
                f"lane {slot['lane']}"
            )
    for i, site in enumerate(_list(data.get("sites"), '"sites"')):
        if not isinstance(site, dict) or not isinstance(site.get("site"), str):
            raise ProfileError(
                f'call site #{i} must be an object with a "site" string, found {_show(site)}'
            )
        _index(site.get("ubatch"), f"call site #{i} 'ubatch'", ubatches, "ubatches")
        _index(site.get("lane"), f"call site #{i} 'lane'", lanes, "lanes")
        _int(site.get("peak"), f"call site #{i} 'peak'")
        for layout in _list(site.get("layouts"), f"call site #{i} 'layouts'"):
            _dict(layout, f"call site #{i} layout")
            _int(layout.get("total"), f"call site #{i} layout 'total'")
            _int(layout.get("padding"), f"call site #{i} layout 'padding'")
            _check_views(layout.get("views"), f"call site #{i} layout")
    for i, rank in enumerate(_list(data.get("ranks"), '"ranks"')):
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ProfileError(f'"ranks" #{i} must be an int, found {_show(rank)}')
    for i, event in enumerate(_list(data.get("timeline"), '"timeline"')):
        where = f"timeline entry #{i}"
        missing = [k for k in _EVENT_KEYS if k not in _dict(event, where)]
        if missing:
            raise ProfileError(
                f"{where} lacks {', '.join(map(repr, missing))} (every entry needs "
                f"{', '.join(map(repr, _EVENT_KEYS))}), found {_show(event)}"
            )
        t = event["t"]
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float))
            or not 0 <= t <= _LIMIT
            or not math.isfinite(t)
        ):
            raise ProfileError(
                f"{where} 't' must be a finite number of seconds >= 0, found {_show(t)}"
            )
        _index(event.get("ubatch"), f"{where} 'ubatch'", ubatches, "ubatches")
        _index(event.get("lane"), f"{where} 'lane'", lanes, "lanes")
        for name in ("old", "new"):
            _int(event.get(name), f"{where} {name!r}")
        for name in ("caller", "kind"):
            if not isinstance(event.get(name), str):
                raise ProfileError(
                    f"{where} {name!r} must be a string, found {_show(event.get(name))}"
                )
    return data


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
    """``new`` merged into ``old`` (same key): maxima of every figure, runs added."""
    merged = dict(new)
    slots = []
    raised = False
    for before, now in zip(old["slots"], new["slots"], strict=True):
        slot = dict(now)
        for name in ("peak", "capacity", "growths"):
            slot[name] = max(before[name], now[name])
        raised = raised or now["peak"] > before["peak"] or now["capacity"] > before["capacity"]
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
    merged["runs"] = old["runs"] + new["runs"]
    merged["ranks"] = sorted(set(old["ranks"]) | set(new["ranks"]))
    return merged


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``PATH.lock`` (no lock where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: atomic replace only
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_merged(path: str | os.PathLike[str], run: dict[str, Any]) -> str | None:
    """Merge ``run`` into the profile at ``path`` under the lock, atomically.

    Returns why the file on disk was replaced instead of merged into (it was corrupt or
    recorded for another configuration), or None.

    Raises
    ------
    OSError
        When the file cannot be written (the caller warns).
    """
    target = Path(path)
    replaced: str | None = None
    with _exclusive(target):
        try:
            existing = read_profile(target)
        except FileNotFoundError:
            merged = run
        except ProfileError as exc:
            replaced, merged = f"it was not a valid profile: {exc}", run
        else:
            if key_of(existing) == key_of(run):
                merged = merge_profiles(existing, run)
            else:
                replaced = f"it was recorded for {describe_key(key_of(existing))}"
                merged = run
        merged = {**merged, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
        )
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(merged, handle, indent=1)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    return replaced
