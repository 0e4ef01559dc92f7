"""vLLM's workspace call sites ported to ``arena.compat.vllm`` as vLLM calls them, with
threads gated by events to force one interleaving (hostile round 6)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

import arena.compat.vllm as ws  # noqa: E402
from arena.compat.vllm import WorkspaceManager, reset_workspace_manager  # noqa: E402

CPU = torch.device("cpu")
TIMEOUT = 10


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    reset_workspace_manager()
    yield
    reset_workspace_manager()
    ws._THREAD_ID_TO_CONTEXT.clear()


def test_a_resource_whose_factory_straddles_lock_is_not_stored_after_lock() -> None:
    """lock() returns while another thread's factory for a new key is still running; when
    that factory returns, the new key must be refused (vLLM's locked assertion), not stored
    in a locked manager: a request in flight while lock() runs either finishes before lock()
    returns or sees the lock (docs/overview.md, "Threads and safety")."""
    m = WorkspaceManager(CPU, num_ubatches=2)
    inside, go = threading.Event(), threading.Event()
    result: list[object] = []

    def factory() -> object:
        inside.set()
        assert go.wait(TIMEOUT)
        return object()

    def build() -> None:
        try:
            result.append(m.get_persistent_resource("late", factory))
        except AssertionError as exc:
            result.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    assert inside.wait(TIMEOUT)
    m.lock()  # returns while the factory runs
    go.set()
    thread.join(TIMEOUT)
    assert len(result) == 1
    assert isinstance(result[0], AssertionError), "a new key was stored after lock() returned"
    assert "'late' was not allocated during warmup" in str(result[0])
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        m.get_persistent_resource("late", object)


def test_a_missed_micro_batchs_persistent_tensor_is_not_a_resource_after_lock() -> None:
    """docs/vllm-migration.md: get_persistent stores its tensor as the persistent resource
    ``(torch.Tensor, key)``. On a micro-batch that missed warm-up, get_persistent returns
    the tensor lock() gave it (its own block, not a sibling's), and no resource is
    registered after lock(): asking for it as a resource raises the locked assertion, as
    the docs say (ask with get_persistent there)."""
    m = WorkspaceManager(CPU, num_ubatches=2)
    first = m.get_persistent("acc", (4,), torch.float32, zero_init=True)
    m.lock()
    ws._THREAD_ID_TO_CONTEXT[threading.get_ident()] = 1  # the micro-batch that missed warm-up
    try:
        mine = m.get_persistent("acc", (4,), torch.float32)
        assert mine.shape == (4,) and mine.data_ptr() != first.data_ptr()
        assert m.get_persistent("acc", (4,), torch.float32) is mine
        with pytest.raises(AssertionError, match="was not allocated during warmup"):
            m.get_persistent_resource((torch.Tensor, "acc"), lambda: None)
    finally:
        ws._THREAD_ID_TO_CONTEXT.pop(threading.get_ident(), None)


class HelperManager(WorkspaceManager):
    """A manager with a helper method, as an engine might add one."""

    def attention_workspace(self, n: int) -> list[torch.Tensor]:
        return self.get_simultaneous(((n,), torch.float32))


def forward_through_helper(m: HelperManager, n: int) -> list[torch.Tensor]:
    return m.attention_workspace(n)


def test_locked_assertion_names_the_caller_past_every_manager_frame_as_vllm() -> None:
    """vLLM's locked assertion names the first frame whose ``self`` is not a
    WorkspaceManager, so a helper method on a subclass is skipped and its caller named
    (docs/vllm-migration.md: "vLLM's error, word for word"). The drop-in names the
    helper method instead."""
    m = HelperManager(CPU)
    forward_through_helper(m, 16)
    m.lock()
    with pytest.raises(AssertionError) as caught:
        forward_through_helper(m, 1 << 20)
    assert ":forward_through_helper'" in str(caught.value), str(caught.value)
