"""Fixtures the planner's tests share."""

from __future__ import annotations

import pytest

from arena.planning import offsets, search


@pytest.fixture(params=["compiled", "python"])
def past_the_cap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for instances too large to search, and past the work budget; on the compiled
    placement (where it is in use) and on the Python one."""
    if request.param == "python":
        monkeypatch.setattr(offsets, "compiled", None)
    elif offsets.compiled is None:
        pytest.skip(f"the compiled placement is not in use here: {offsets.WHY_PYTHON}")
    monkeypatch.setattr(offsets, "WORK_BUDGET", 0)
    monkeypatch.setattr(search, "MAX_SEARCH_BLOCKS", 0)
