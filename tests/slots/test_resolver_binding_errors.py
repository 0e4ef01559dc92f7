"""The error for a binding a resolver overrides names the right fix (review 39).

``ubatch(i)`` on an arena with a ``ubatch_resolver`` said "bind ubatchs per thread", and
``lane(i)`` with a ``lane_resolver`` pointed at "the current micro-batch id", which is
what vLLM resolves micro-batches by, not lanes (vLLM's lanes: ``use_workspace_lane``).
"""

from __future__ import annotations

import pytest

import arena


def test_a_ubatch_binding_refused_by_a_resolver_says_ubatches() -> None:
    ws = arena.Arena("cpu", framework="numpy", ubatches=2, ubatch_resolver=lambda: 0)
    with pytest.raises(arena.ConfigError) as caught:
        ws.bind_ubatch(1)
    message = str(caught.value)
    assert "bind ubatches per thread or context" in message and "ubatchs" not in message
    assert "(vLLM: the current micro-batch id)" in message
    ws.close()


def test_a_lane_binding_refused_by_a_resolver_names_the_lane_fix() -> None:
    ws = arena.Arena("cpu", framework="numpy", lanes=2, lane_resolver=lambda: 0)
    with pytest.raises(arena.ConfigError) as caught, ws.lane(1):
        pass
    message = str(caught.value)
    assert "micro-batch" not in message
    assert "(vLLM: use_workspace_lane())" in message and "bind lanes per thread" in message
    ws.close()
