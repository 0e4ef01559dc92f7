"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/compat/vllm.py``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from arena.compat import vllm
from arena.compat.vllm import (
    WorkspaceManager,
    current_workspace_manager,
    init_workspace_manager,
    reset_workspace_manager,
)

torch = pytest.importorskip("torch")


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


def test_every_allocation_runs_in_the_managers_alloc_context() -> None:
    entered: list[str] = []

    @contextmanager
    def context() -> Iterator[None]:
        entered.append("enter")
        yield

    manager = WorkspaceManager("cpu", alloc_context=context)
    try:
        manager.get_simultaneous(((1024,), torch.float32))
        assert entered == ["enter"]
    finally:
        manager.arena.close()


def test_a_cuda_manager_takes_its_memory_from_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM counts its memory through torch's allocator: the drop-in asks torch, not the
    # default CUDA source (CuPy's, where CuPy is installed).
    made: list[dict[str, Any]] = []

    def recording_arena(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        raise RuntimeError("stop here: no CUDA device to build it on")

    monkeypatch.setattr(vllm, "Arena", recording_arena)
    with pytest.raises(RuntimeError, match="stop here"):
        WorkspaceManager("cuda:0")
    with pytest.raises(RuntimeError, match="stop here"):
        WorkspaceManager("cpu")
    assert [m.get("source", "missing") for m in made] == ["torch", None]


def test_the_debug_log_says_locked_at_lock_and_unlocked_at_unlock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", "1")
    manager = WorkspaceManager("cpu")
    try:
        manager.get_simultaneous(((1024,), torch.float32))
        with caplog.at_level(logging.INFO, logger="arena.compat.vllm"):
            manager.lock()
            after_lock = [r.getMessage() for r in caplog.records]
            manager.unlock()
            after_unlock = [r.getMessage() for r in caplog.records][len(after_lock) :]
    finally:
        manager.arena.close()
    assert [m.split(".")[0] for m in after_lock] == ["[WORKSPACE DEBUG] Workspace locked"]
    assert [m.split(".")[0] for m in after_unlock] == ["[WORKSPACE DEBUG] Workspace unlocked"]
