"""``python -m arena plan PROFILE [--time-limit SECONDS]``: re-plan a profile's step plans.

Each step plan a profile stores (see :mod:`arena.observe.profilesteps`) is planned again by
:func:`arena.plan_offsets` with the time limit, offline, and written back when the new plan
spans fewer bytes; a slot whose planned need came from its steps gets the new need, so a
restarted engine presizes to the better plan. Prints the bytes before and after per key.

A slot's planned need is the larger of its steps' reach and its largest request outside
any step; the profile keeps only the larger, so where the steps set it, the new need is
their new reach: a request outside the steps larger than that grows the slot on the first
run after a restart.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from arena.errors import ConfigError
from arena.observe.files import exclusive
from arena.observe.profilefile import read_profile, write_atomically
from arena.observe.profileschema import check_profile
from arena.observe.report import read_named_profile
from arena.planning.offsets import check_time_limit, plan_offsets

__all__ = ["main", "replan_profile"]


def _blocks(entry: dict[str, Any]) -> list[tuple[int, int, int]]:
    """A stored step's blocks as (bytes, first request, last request)."""
    firsts = [r for r, count in enumerate(entry["counts"]) for _ in range(count)]
    return list(zip(entry["sizes"], firsts, entry["lasts"], strict=True))


def _reach(entry: dict[str, Any]) -> int:
    return int(entry["base"] + entry["total"] + entry["above"]) if entry["top_level"] else 0


def replan_profile(
    profile: dict[str, Any], time_limit: float | None
) -> tuple[dict[str, Any], list[tuple[int, Any, int, int, bool]]]:
    """A copy of ``profile`` with every step plan re-planned where that is smaller, and per
    step (slot, key, bytes before, bytes after, proven optimal)."""
    alignment = profile["alignment"]
    rows: list[tuple[int, Any, int, int, bool]] = []
    slots = []
    for i, slot in enumerate(profile["slots"]):
        steps = []
        old_reach = max((_reach(e) for e in slot.get("steps", [])), default=0)
        for entry in slot.get("steps", []):
            plan = plan_offsets(_blocks(entry), alignment=alignment, time_limit=time_limit)
            new = dict(entry)
            if plan.total_bytes < entry["total"]:
                new["offsets"], new["total"] = list(plan.offsets), plan.total_bytes
            rows.append((i, entry["key"], entry["total"], new["total"], plan.optimal))
            steps.append(new)
        copy = dict(slot)
        if "steps" in slot:
            copy["steps"] = steps
            new_reach = max((_reach(e) for e in steps), default=0)
            if slot.get("planned", 0) and slot["planned"] == old_reach:
                copy["planned"] = new_reach
        slots.append(copy)
    return {**profile, "slots": slots}, rows


def _write(target: Path, profile: dict[str, Any]) -> None:
    """Replace ``target`` with ``profile`` atomically, never with what the reader refuses."""
    check_profile(profile)
    write_atomically(target, profile)


def main(argv: list[str]) -> int:
    """Re-plan the profile's steps, print bytes before and after, write them back."""
    parser = argparse.ArgumentParser(
        prog="python -m arena plan",
        description=(
            "Re-plan the step plans stored in a profile with an exact search and write "
            "them back where smaller: a restarted engine presizes to the better plan."
        ),
    )
    parser.add_argument("profile", help="the profile file (Arena(profile=PATH))")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds of exact search per step plan (default: 60)",
    )
    args = parser.parse_args(argv)
    try:
        limit = check_time_limit(args.time_limit)
    except ConfigError:
        print(
            f"python -m arena plan: --time-limit must be a finite number of seconds, 0 or "
            f"more (e.g. --time-limit 60); got {args.time_limit}",
            file=sys.stderr,
        )
        return 2
    target = Path(os.path.realpath(args.profile))
    profile, code, message = read_named_profile(args.profile)
    if profile is None:
        print(f"python -m arena plan: {message}", file=sys.stderr)
        return code
    # Planned without the lock (it may take minutes); written only if nobody wrote since.
    new, rows = replan_profile(profile, limit)
    for slot, key, before, after, optimal in rows:
        proven = "optimal" if optimal else "not proven optimal"
        print(f"slot {slot} step {key!r}: {before} -> {after} bytes ({proven})")
    if not rows:
        print(
            "no step plans in this profile: nothing to re-plan (an engine stores them "
            "when it runs steps, `with ws.step(key):`, in an Arena(profile=PATH))"
        )
    if not [row for row in rows if row[3] < row[2]]:
        return 0
    written = exclusive(
        target.with_name(target.name + ".lock"), partial(_write_unchanged, target, profile, new)
    )
    if not written:
        print(f"{target} changed while planning: not written; run again", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


def _write_unchanged(target: Path, profile: dict[str, Any], new: dict[str, Any]) -> bool:
    """Under the profile's lock: write ``new`` over ``target`` if it still holds
    ``profile`` (nobody wrote since it was read); whether it did."""
    if read_profile(target) != profile:
        return False
    _write(target, new)
    return True
