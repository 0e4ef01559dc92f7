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
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ArenaError

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

    Raises
    ------
    FileNotFoundError
        If there is no file.
    ProfileError
        With the reason, when it cannot be read or is not a valid profile.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot read it ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"it is not valid JSON ({exc})") from exc
    return check_profile(data)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProfileError(f"{where} must be an int >= 0, found {value!r}")
    return value


def check_profile(data: Any) -> dict[str, Any]:
    """``data`` if it is a valid profile of this schema version.

    Raises
    ------
    ProfileError
        Naming the first problem found.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f'it is not an arena profile (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ProfileError(
            f"it has schema version {data.get('version')!r}; this arena reads version {VERSION}"
        )
    if not isinstance(data.get("device"), str):
        raise ProfileError(f'"device" must be a string, found {data.get("device")!r}')
    for name in ("ubatches", "lanes", "alignment", "runs"):
        _int(data.get(name), f'"{name}"')
    slots = data.get("slots")
    count = data["ubatches"] * data["lanes"]
    if not isinstance(slots, list) or len(slots) != count:
        raise ProfileError(f'"slots" must list {count} slots (ubatches x lanes)')
    for i, slot in enumerate(slots):
        if not isinstance(slot, dict):
            raise ProfileError(f"slot #{i} must be an object, found {slot!r}")
        for name in ("ubatch", "lane", "peak", "capacity", "growths"):
            _int(slot.get(name), f"slot #{i} {name!r}")
    sites = data.get("sites")
    if not isinstance(sites, list):
        raise ProfileError('"sites" must be a list')
    for i, site in enumerate(sites):
        if not isinstance(site, dict) or not isinstance(site.get("site"), str):
            raise ProfileError(f'call site #{i} must be an object with a "site" string')
        for name in ("ubatch", "lane", "peak"):
            _int(site.get(name), f"call site #{i} {name!r}")
        if not isinstance(site.get("layouts"), list):
            raise ProfileError(f'call site #{i} must have a "layouts" list')
        for layout in site["layouts"]:
            if not isinstance(layout, dict) or not isinstance(layout.get("views"), list):
                raise ProfileError(f"call site #{i} has a malformed layout {layout!r}")
            _int(layout.get("total"), f"call site #{i} layout 'total'")
            _int(layout.get("padding"), f"call site #{i} layout 'padding'")
    if not isinstance(data.get("timeline"), list) or not isinstance(data.get("ranks"), list):
        raise ProfileError('"timeline" and "ranks" must be lists')
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
