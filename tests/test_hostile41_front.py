"""Hostile review (hostile41) of the framework-name hints (arena/config.py
check_framework) where a front is asked for by name: ``ws.front(name)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.errors import ConfigError


@pytest.mark.parametrize(
    ("framework", "message"),
    [
        (["numpy"], r"^unknown framework \['numpy'\]; choose one of numpy, torch, cupy, jax$"),
        ({"torch"}, r"^unknown framework \{'torch'\}; choose one of"),
        (np, r"got the module numpy; pass its name, 'numpy'$"),
        ("NumPy", r"\(for 'NumPy' write 'numpy'\)$"),
    ],
)
def test_a_front_asked_for_by_a_bad_name_is_a_config_error(framework: Any, message: str) -> None:
    """ws.front(['numpy']) (a name wrapped in a list, as Arena(framework=...) refuses with
    a ConfigError) raised a bare TypeError, "unhashable type: 'list'", from the fronts'
    dict before the name was checked."""
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(ConfigError, match=message):
            ws.front(framework)
        assert ws.front("numpy") is ws.numpy  # the name the hint gives works
