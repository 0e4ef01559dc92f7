"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/compat/vllm.py``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("torch")

from arena.compat.vllm import (
    current_workspace_manager,
    init_workspace_manager,
    reset_workspace_manager,
)


@pytest.fixture(autouse=True)
def _fresh_manager() -> Iterator[None]:
    reset_workspace_manager()
    yield
    current = None
    try:
        current = current_workspace_manager()
    except AssertionError:
        pass
    if current is not None:
        current.arena.close()
    reset_workspace_manager()


def test_reinitialising_names_the_device_the_manager_was_made_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    init_workspace_manager("cpu")
    first = current_workspace_manager()
    with caplog.at_level(logging.WARNING, logger="arena.compat.vllm"):
        init_workspace_manager("cpu", 2)
    first.arena.close()
    assert [r.getMessage() for r in caplog.records] == [
        "WorkspaceManager already initialized on device cpu, reinitializing on device cpu"
    ]
    assert current_workspace_manager().arena.ubatches == 2
