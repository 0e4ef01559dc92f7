"""The bench's checks (arena/tools/checks.py): what they time, not how fast (no timing
assertions)."""

from __future__ import annotations

import dis
import math
from typing import Any

import numpy as np
import pytest

from arena.tools import checks


def test_the_never_seen_baseline_is_one_np_empty_per_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = (
        ((4, 4), np.dtype("float32")),
        ((4,), np.dtype("int8")),
        ((4, 4, 4), np.dtype("int64")),
    )
    baseline = checks._empty_baseline(specs)
    calls: list[tuple[Any, Any]] = []
    monkeypatch.setattr(np, "empty", lambda shape, dtype: calls.append((shape, dtype)))
    baseline(0)
    assert calls == list(specs)
    # Straight-line code: no loop of the bench's own charged to NumPy.
    assert not [i for i in dis.get_instructions(baseline) if i.opname == "FOR_ITER"]


@pytest.mark.parametrize("grown", [False, True])
def test_never_seen_pairs_every_trial(grown: bool) -> None:
    figure = checks.never_seen(3, 3, number=8, grown=grown)
    assert figure.rounds == 3
    assert all(math.isfinite(x) and x > 0 for x in (figure.median, figure.top_us, figure.bottom_us))
    assert figure.p10 <= figure.median <= figure.p90
