"""Fixtures shared by the memory sources' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from arena.memory import devices


@pytest.fixture
def fresh_device_counts() -> Iterator[None]:
    """Forget the cached device counts before and after a test, so that no test counts a
    stand-in CuPy's or torch's devices another test installed, and none leaves its own
    for the next."""
    devices.forget_device_counts()
    yield
    devices.forget_device_counts()
