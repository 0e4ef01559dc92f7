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
from tests.sources import DirtySource

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


def test_a_persistent_tensor_is_zeroed_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # Over memory handed out dirty (0xA5 bytes), as reused device memory is: vLLM's
    # get_persistent zeroes only with zero_init=True.
    real_arena = vllm.Arena

    def dirty_arena(*args: Any, **kwargs: Any) -> Any:
        return real_arena(*args, **{**kwargs, "source": DirtySource()})

    monkeypatch.setattr(vllm, "Arena", dirty_arena)
    manager = WorkspaceManager("cpu")
    try:
        plain = manager.get_persistent("plain", (4,), torch.int32)
        zeroed = manager.get_persistent("zeroed", (4,), torch.int32, zero_init=True)
        assert plain.tolist() == [-1515870811] * 4  # 0xA5A5A5A5, left as it was
        assert zeroed.tolist() == [0] * 4
    finally:
        manager.arena.close()


def test_a_key_the_arena_holds_under_another_shape_is_refused_in_vllms_words() -> None:
    manager = WorkspaceManager("cpu")
    try:
        manager.arena.torch.get_persistent("k", (4,), torch.float32)
        with pytest.raises(ValueError) as caught:
            manager.get_persistent("k", (8,), torch.float16)
    finally:
        manager.arena.close()
    assert str(caught.value) == (
        "Persistent workspace 'k' has shape=torch.Size([4]), dtype=torch.float32; "
        "requested shape=(8,), dtype=torch.float16."
    )
