"""A call counter for tests that check which Python path a request took (the compiled
hits must not call into it)."""

from __future__ import annotations

from typing import Any

import pytest


def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Wrap ``owner.name`` (undone at the test's end) so that every call counts; returns
    the one-item list holding the count."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls
