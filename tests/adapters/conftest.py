"""The adapters' tests run host arenas: their JAX computations belong on JAX's CPU
device. Where JAX's default device is a GPU (a CUDA build of JAX, as on the GPU
machine), an uncommitted host view would be moved to the GPU and a scratch callback's
host buffers would be device buffers; the first GPU run failed a dozen tests on that.
So every test here but the ``gpu`` ones runs with the CPU as JAX's default device (the
whole process's setting, so that threads a test starts see it too)."""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterator

import pytest


def _jax_has_an_accelerator_plugin() -> bool:
    """Whether a JAX backend besides the CPU is installed (JAX's GPU and TPU builds are
    plugins in the ``jax_plugins`` namespace), found without importing JAX."""
    spec = importlib.util.find_spec("jax_plugins")
    locations = spec.submodule_search_locations if spec is not None else None
    return bool(locations) and any(True for _ in pkgutil.iter_modules(list(locations or ())))


#: Only there can JAX's default device be other than the CPU. Elsewhere (CI, the
#: mutation runs) the fixture does nothing: importing JAX and starting its CPU backend in
#: every test made mutmut's forked children hang (Round 18a).
#: ARENA_TEST_JAX_ON_HOST=1 turns it on anyway (its own test, on a machine without one).
_ACCELERATOR = os.environ.get("ARENA_TEST_JAX_ON_HOST") == "1" or _jax_has_an_accelerator_plugin()


@pytest.fixture(autouse=True)
def _jax_computes_on_the_host(request: pytest.FixtureRequest) -> Iterator[None]:
    if not _ACCELERATOR:
        yield
        return
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
