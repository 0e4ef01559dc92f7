"""Run alone by test_hostile48_jax_default.py (a file pytest does not collect by itself):
a test that imports JAX itself, in a process where nothing imported it at collection."""

from __future__ import annotations

import pytest


def test_jax_imported_by_the_test_itself_computes_on_the_host() -> None:
    jax = pytest.importorskip("jax")
    assert jax.config.jax_default_device == jax.devices("cpu")[0]
