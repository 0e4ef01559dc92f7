"""The planned steps a profile keeps per slot: their JSON schema and how runs merge them.

A slot entry of a profile may hold ``"steps"``: one entry per step key the slot had a
plan for (see :mod:`arena.planning.steps`), what a restarted arena needs to replay the
plan from its first run::

    {"key": "forward",            # the step key: a str or an int (not a bool)
     "counts": [1, 1, 3, ...],    # views per request, in request order
     "sizes": [25600, ...],       # per block (one view of one request): aligned bytes
     "lasts": [4, ...],           # per block: the last request it is live for
     "offsets": [0, ...],         # per block: its planned offset from the step's start
     "total": 102400,             # the bytes the plan spans
     "base": 0, "above": 0,       # the highest start of a run; bytes needed above its end
     "top_level": true,           # a run started with no other step running on the slot
     "recorded_at": 0}            # where the recorded run started in the slot

A block's first request follows from ``counts`` (block numbers run in request order), and
the plan's LOAD from the blocks' sizes and lives: neither is stored. Keys other than a
str or an int (a tuple, an enum) cannot be written to JSON and read back as themselves:
their plans are not stored, and their steps record again after a restart.

This module checks one entry (:func:`step_problem`); :mod:`arena.observe.profileschema`
calls it for :func:`~arena.observe.profileschema.check_profile` and drops an entry it
refuses when repairing a profile. It imports nothing of the package: the schema module,
the recorder and the step books use it alike.
"""

from __future__ import annotations

import bisect
from typing import Any

from arena.base.layout import int_not_bool
from arena.planning.records import storable_key

__all__ = ["STEP_LISTS", "merge_steps", "step_ident", "step_problem", "storable_key"]

#: The per-request (``counts``) and per-block lists of a step entry.
STEP_LISTS = ("counts", "sizes", "lasts", "offsets")
_FIGURES = ("total", "base", "above", "recorded_at")


def step_ident(key: Any) -> tuple[bool, Any]:
    """What tells two stored keys apart: ``5`` and ``"5"`` are different steps."""
    return isinstance(key, str), key


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _count(value: Any, limit: int) -> bool:
    return int_not_bool(value) and 0 <= value <= limit


def _lists(entry: dict[str, Any], limit: int) -> dict[str, list[int]] | str:
    """The entry's lists (each of ints from 0 to ``limit``, as long as it must be), or
    what is wrong with them."""
    found: dict[str, list[int]] = {}
    for name in STEP_LISTS:
        value = entry.get(name)
        if not isinstance(value, list):
            return f"{name!r} must be a list, found {_show(value)}"
        bad = [i for i, item in enumerate(value) if not _count(item, limit)]
        if bad:
            first = bad[0]
            found_text = _show(value[first])
            return f"{name!r} #{first} must be an int from 0 to 2**63 - 1, found {found_text}"
        found[name] = value
    blocks = sum(found["counts"])
    for name in STEP_LISTS[1:]:
        if len(found[name]) != blocks:
            return (
                f"{name!r} must list one item per block ({blocks}: the sum of 'counts'), "
                f"found {len(found[name])}"
            )
    return found


def step_problem(entry: Any, alignment: int, limit: int) -> str | None:
    """What is wrong with one stored step entry, or None when a replay can use it.

    Checked: ``key`` a str or an int; the lists hold ints from 0 to ``limit``, one per
    request (``counts``) or one per block (the sum of ``counts``); ``sizes`` and
    ``offsets`` multiples of ``alignment``; every block's last request from the request
    that made it to the last request; every block inside ``total``; no two blocks live at
    the same request share a byte (a replay would hand out overlapping views);
    ``total``, ``base``, ``above`` and ``recorded_at`` ints from 0 to ``limit``, and
    ``base + total + above`` (the bytes of its slot the step reaches) at most ``limit``;
    ``top_level`` a bool. Other fields are ignored.

    Parameters
    ----------
    entry
        Parsed JSON.
    alignment : int
        The profile's alignment.
    limit : int
        The largest figure a profile may hold.
    """
    if not isinstance(entry, dict):
        return f"must be an object, found {_show(entry)}"
    if not storable_key(entry.get("key")):
        return f"'key' must be a string or an int, found {_show(entry.get('key'))}"
    for name in _FIGURES:
        if not _count(entry.get(name), limit):
            return f"{name!r} must be an int from 0 to 2**63 - 1, found {_show(entry.get(name))}"
    if not isinstance(entry.get("top_level"), bool):
        return f"'top_level' must be true or false, found {_show(entry.get('top_level'))}"
    total = entry["total"]
    if entry["base"] + total + entry["above"] > limit:
        return "'base' + 'total' + 'above' must be at most 2**63 - 1"
    found = _lists(entry, limit)
    if isinstance(found, str):
        return found
    counts, sizes, lasts, offsets = (found[name] for name in STEP_LISTS)
    for name in ("sizes", "offsets"):
        unaligned = [i for i, value in enumerate(found[name]) if value % alignment]
        if unaligned:
            i = unaligned[0]
            return f"{name!r} #{i} is {found[name][i]}, not a multiple of the alignment {alignment}"
    return _placement_problem(counts, sizes, lasts, offsets, total)


def _placement_problem(
    counts: list[int], sizes: list[int], lasts: list[int], offsets: list[int], total: int
) -> str | None:
    """Lives inside the step's requests, blocks inside ``total``, no co-live overlap.

    Blocks are born in request order; one that overlaps a block live at once overlaps a
    block live at its birth (the later born of the two). The live blocks never overlap
    one another, so sorted by offset a new block need only be compared with its two
    neighbours.
    """
    requests = len(counts)
    dying: dict[int, list[int]] = {}  # request -> blocks whose last request it is
    starts: list[int] = []  # live nonempty blocks, by offset
    ends: list[int] = []
    owners: list[int] = []
    block = 0
    for request, count in enumerate(counts):
        for b in dying.pop(request - 1, []):
            i = bisect.bisect_left(starts, offsets[b])
            del starts[i], ends[i], owners[i]
        for b in range(block, block + count):
            if lasts[b] < request:
                return f"'lasts' #{b} is {lasts[b]}, before request {request} that makes the block"
            if lasts[b] >= requests:
                return f"'lasts' #{b} is {lasts[b]}, past the step's last request ({requests - 1})"
            start, end = offsets[b], offsets[b] + sizes[b]
            if end > total:
                return f"block #{b} ends at byte {end}, past 'total' {total}"
            if start == end:
                continue
            i = bisect.bisect_left(starts, start)
            for j in (i - 1, i):
                if 0 <= j < len(starts) and starts[j] < end and start < ends[j]:
                    return (
                        f"blocks #{owners[j]} and #{b} are live at request {request} and "
                        f"share bytes ({starts[j]}..{ends[j]} and {start}..{end})"
                    )
            starts.insert(i, start)
            ends.insert(i, end)
            owners.insert(i, b)
            dying.setdefault(lasts[b], []).append(b)
        block += count
    return None


def merge_steps(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One slot's stored plans of two runs: the newer run's plan of a key wins; keys only
    the older run planned stay."""
    kept = {step_ident(entry["key"]): entry for entry in old}
    kept.update((step_ident(entry["key"]), entry) for entry in new)
    return list(kept.values())
