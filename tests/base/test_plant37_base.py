"""Plant round 37 (base): the dtype objects kept for the next Planner (``seeds()``)."""

from __future__ import annotations

import numpy as np
import pytest

from arena.base import dtypes


def test_seeds_keep_only_the_dtypes_that_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """``resolve_natives`` stops at the first dtype that does not resolve, and only the
    ones before it are kept as seeds: a type after it (or the one refused, ``object``, a
    type too) is not (slip: every dtype object of the call kept, a new Planner then asked
    to resolve ``object``)."""
    monkeypatch.setattr(dtypes, "_SEEDS", ())
    answers = dtypes.resolve_natives([np.float32, object, np.int8], lambda d: d.name)
    assert answers == ((4, "float32"), None, None)
    assert dtypes.seeds() == (np.float32,)
