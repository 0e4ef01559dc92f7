"""A Triton allocator serves one arena's slots: like the arena, its fronts, scopes and
steps, it refuses to be copied or pickled and says why. A deep copy or a pickle failed
with "cannot pickle 'WeakMethod' object" (and a deep copy that got through would have
copied the arena's slot table: two sets of books over one memory)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena

pytest.importorskip("torch")


@pytest.mark.parametrize(
    "how",
    [copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_triton_allocator_refuses_copies_and_says_why(how: Callable[[Any], Any]) -> None:
    with Arena("cpu", framework="torch") as ws:
        allocator = ws.triton_allocator()
        with pytest.raises(TypeError, match="a Triton allocator cannot be copied or pickled"):
            how(allocator)
