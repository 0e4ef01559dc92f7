"""The smallest valid profile, for tests of profile merging, checking and files."""

from __future__ import annotations

from typing import Any


def profile_data(*slots: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A one-run host profile as ``Arena(profile=...)`` writes it, not yet checked.

    Parameters
    ----------
    *slots
        Each slot's fields over a default slot (micro-batch 0, lane 0, no bytes, one
        growth); one default slot when none is given.
    **fields
        Top-level fields that replace the defaults (a bad value for an error test).
    """
    default = {"ubatch": 0, "lane": 0, "peak": 0, "capacity": 0, "growths": 1}
    return {
        "format": "arena-profile",
        "version": 1,
        "device": "cpu",
        "ubatches": 1,
        "lanes": 1,
        "alignment": 256,
        "runs": 1,
        "ranks": [0],
        "slots": [{**default, **slot} for slot in slots or ({},)],
        "sites": [],
        "timeline": [],
        **fields,
    }
