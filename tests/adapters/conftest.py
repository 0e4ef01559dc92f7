"""The adapters' tests run host arenas: their JAX computations belong on JAX's CPU
device. Where JAX's default device is a GPU (a CUDA build of JAX, as on the GPU
machine), an uncommitted host view would be moved to the GPU and a scratch callback's
host buffers would be device buffers; the first GPU run failed a dozen tests on that.
So every test here but the ``gpu`` ones runs with the CPU as JAX's default device (the
whole process's setting, so that threads a test starts see it too)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _jax_computes_on_the_host(request: pytest.FixtureRequest) -> Iterator[None]:
    jax = sys.modules.get("jax")
    if jax is None and importlib.util.find_spec("jax") is not None:
        # A test may import JAX in its own body: where nothing imported it at collection
        # (a shard of the suite, a file run alone) it would compute on JAX's default.
        import jax
    if jax is None or request.node.get_closest_marker("gpu") is not None:
        yield
        return
    previous = jax.config.jax_default_device
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    try:
        yield
    finally:
        jax.config.update("jax_default_device", previous)
