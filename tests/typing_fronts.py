"""What a type checker sees of fronts: checked by mypy in CI (listed in pyproject's
``[tool.mypy] files``), never run. Each ``assert_type`` fails the type check if a front's
views stop being typed."""

from __future__ import annotations

from typing import Any

import jax
import numpy
import torch
from typing_extensions import assert_type

from arena import Arena, Front

ws = Arena("cpu")

assert_type(ws.torch, Front[torch.Tensor])
assert_type(ws.numpy, Front[numpy.ndarray])
assert_type(ws.jax, Front[jax.Array])
assert_type(ws.torch.get_simultaneous(((4,), "float32")), list[torch.Tensor])
assert_type(ws.numpy.get_simultaneous(((4,), "float32")), list[numpy.ndarray])
assert_type(ws.jax.get_simultaneous(((4,), "float32")), list[jax.Array])
assert_type(ws.torch.try_get_simultaneous(((4,), "float32")), list[torch.Tensor] | None)
assert_type(ws.front("torch"), Front[Any])
assert_type(ws.front("torch", inference=True), Front[Any])
assert_type(ws.torch.inference, bool)

with ws.torch.scope() as scope:
    assert_type(scope.get_simultaneous(((4,), "float32")), list[torch.Tensor])
with ws.numpy.step("layer") as step:
    assert_type(step.get_simultaneous(((4,), "float32")), list[numpy.ndarray])
