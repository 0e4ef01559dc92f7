"""Shared fixtures and the ``gpu`` marker policy.

``gpu`` tests are skipped where CuPy sees no CUDA device; with ``ARENA_REQUIRE_GPU=1`` they
fail instead, so a GPU run cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import arena
from arena.devices import cuda_device_count

REQUIRE_GPU = os.environ.get("ARENA_REQUIRE_GPU", "") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REQUIRE_GPU or cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (CuPy sees none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if REQUIRE_GPU and "gpu" in item.keywords and cuda_device_count() == 0:
        pytest.fail("ARENA_REQUIRE_GPU=1 but CuPy sees no CUDA device")


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    yield
    arena.reset_arena(all_devices=True)


@pytest.fixture
def host() -> Iterator[arena.Arena]:
    with arena.Arena("cpu", framework="numpy") as a:
        yield a
