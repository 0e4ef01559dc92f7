"""``arena.compat.vllm``: vLLM call sites run unchanged, with vLLM's errors and log lines."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import arena.compat.vllm as ws  # noqa: E402
from arena.compat.vllm import (  # noqa: E402
    WorkspaceManager,
    current_workspace_manager,
    init_workspace_manager,
    is_workspace_manager_initialized,
    lock_workspace,
    reset_workspace_manager,
    unlock_workspace,
    use_workspace_lane,
)

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    reset_workspace_manager()
    yield
    reset_workspace_manager()
    ws._THREAD_ID_TO_CONTEXT.clear()


def vllm_style_attention(num_tokens: int) -> torch.Tensor:
    """A call site written for vLLM, unchanged."""
    out, lse = current_workspace_manager().get_simultaneous(
        ((num_tokens, 8, 64), torch.bfloat16), ((num_tokens, 8), torch.float32)
    )
    out.fill_(1)
    lse.fill_(2)
    return out


def test_vllm_style_call_site_runs_unchanged() -> None:
    assert not is_workspace_manager_initialized()
    init_workspace_manager(CPU)
    assert is_workspace_manager_initialized()
    out = vllm_style_attention(128)
    assert out.shape == (128, 8, 64) and out.dtype == torch.bfloat16 and out.device == CPU
    lock_workspace()
    assert current_workspace_manager().is_locked()
    vllm_style_attention(64)
    unlock_workspace()
    assert not current_workspace_manager().is_locked()


@pytest.mark.parametrize("device", [CPU, "cpu", torch.device("cpu")])
def test_device_forms(device: object) -> None:
    m = WorkspaceManager(device)
    (x,) = m.get_simultaneous(((4,), torch.float32))
    assert x.device == CPU


def test_layout_matches_vllm_arithmetic() -> None:
    m = WorkspaceManager(CPU)
    a, b, c = m.get_simultaneous(
        ((10,), torch.float32), ((3, 3), torch.float16), ((1,), torch.int8)
    )
    base = a.data_ptr()
    assert (b.data_ptr() - base, c.data_ptr() - base) == (256, 512)
    assert [t.numel() * t.element_size() for t in (a, b, c)] == [40, 18, 1]


def test_two_ubatches_by_two_lanes_are_four_distinct_buffers() -> None:
    m = WorkspaceManager(CPU, num_ubatches=2, num_lanes=2)
    current = [0]
    pointers = set()
    original = ws.dbo_current_ubatch_id
    ws.dbo_current_ubatch_id = lambda: current[0]
    try:
        for ubatch in (0, 1):
            current[0] = ubatch
            for lane in (0, 1):
                with use_workspace_lane(lane):
                    (t,) = m.get_simultaneous(((64,), torch.float32))
                    pointers.add(t.data_ptr())
    finally:
        ws.dbo_current_ubatch_id = original
    assert len(pointers) == 4


def test_thread_map_selects_the_ubatch() -> None:
    m = WorkspaceManager(CPU, num_ubatches=2)
    seen: dict[int, int] = {}

    def run(ubatch: int) -> None:
        ws._THREAD_ID_TO_CONTEXT[threading.get_ident()] = ubatch
        (t,) = m.get_simultaneous(((32,), torch.float32))
        seen[ubatch] = t.data_ptr()

    threads = [threading.Thread(target=run, args=(u,)) for u in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen[0] != seen[1]


def test_lane_restores_on_context_exit_and_errors_match_vllm() -> None:
    m = WorkspaceManager(CPU, num_lanes=2)
    with use_workspace_lane(1):
        (inner,) = m.get_simultaneous(((8,), torch.float32))
    (outer,) = m.get_simultaneous(((8,), torch.float32))
    assert inner.data_ptr() != outer.data_ptr()
    with (
        pytest.raises(ValueError, match=r"^Workspace lane must be non-negative, got -1\.$"),
        use_workspace_lane(-1),
    ):
        pass
    with (
        use_workspace_lane(2),
        pytest.raises(
            RuntimeError, match=r"^Workspace lane 2 is not configured; manager has 2 lane\(s\)\.$"
        ),
    ):
        m.get_simultaneous(((8,), torch.float32))
    with pytest.raises(ValueError, match=r"^num_lanes must be at least one, got 0\.$"):
        WorkspaceManager(CPU, num_lanes=0)


def test_lock_blocks_growth_with_vllms_assertion_and_unlock_restores_it() -> None:
    m = WorkspaceManager(CPU)
    m.get_simultaneous(((1024,), torch.float32))
    m.lock()
    with pytest.raises(AssertionError) as info:
        m.get_simultaneous(((1 << 20,), torch.float32))
    message = str(info.value)
    assert message.startswith("Workspace is locked but allocation from 'test_compat_vllm.py:")
    assert "test_lock_blocks_growth_with_vllms_assertion_and_unlock_restores_it' requires " in (
        message
    )
    assert "requires 4.00 MB, current size is 0.00 MB." in message
    assert message.endswith("Workspace growth is not allowed after locking.")
    assert m.try_get_simultaneous(((1 << 20,), torch.float32)) is None
    m.unlock()
    (big,) = m.get_simultaneous(((1 << 20,), torch.float32))
    assert big.numel() == 1 << 20


def test_reserve_sizes_every_ubatch_slot_before_lock() -> None:
    m = WorkspaceManager(CPU, num_ubatches=2)
    nbytes = m.reserve(((1000,), torch.float32), ((7,), torch.int64))
    assert nbytes == 4096 + 256
    m.lock()
    original = ws.dbo_current_ubatch_id
    ws.dbo_current_ubatch_id = lambda: 1
    try:
        m.get_simultaneous(((1000,), torch.float32), ((7,), torch.int64))  # no growth needed
    finally:
        ws.dbo_current_ubatch_id = original
    with pytest.raises(AssertionError, match="Workspace is locked"):
        m.reserve(((1 << 20,), torch.float32))


def test_persistent_buffers_survive_scratch_calls() -> None:
    m = WorkspaceManager(CPU)
    acc = m.get_persistent("acc", (16,), torch.float32, zero_init=True)
    assert torch.count_nonzero(acc) == 0
    acc += 3
    for n in (16, 4096, 1 << 16):
        (s,) = m.get_simultaneous(((n,), torch.float32))
        s.fill_(-1)
    again = m.get_persistent("acc", (16,), torch.float32)
    assert again is acc and torch.all(again == 3)
    with pytest.raises(ValueError) as info:
        m.get_persistent("acc", (8,), torch.float32)
    assert str(info.value) == (
        "Persistent workspace 'acc' has shape=torch.Size([16]), dtype=torch.float32; "
        "requested shape=(8,), dtype=torch.float32."
    )
    m.lock()
    with pytest.raises(AssertionError) as locked:
        m.get_persistent("new", (4,), torch.float32)
    assert str(locked.value) == (  # vLLM's text: the key it stores is (torch.Tensor, key)
        "Workspace is locked but (<class 'torch.Tensor'>, 'new') was not allocated during "
        "warmup for the current ubatch and lane."
    )
    resource = m.get_persistent_resource
    with pytest.raises(AssertionError, match="warmup for the current ubatch and lane"):
        resource("plan", dict)
    m.unlock()
    plan = resource("plan", dict)
    m.lock()
    assert resource("plan", dict) is plan


def test_current_manager_uninitialised_and_reinit_warning(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(AssertionError, match="WorkspaceManager not initialized"):
        current_workspace_manager()
    init_workspace_manager(CPU)
    with caplog.at_level(logging.WARNING, logger="arena.compat.vllm"):
        init_workspace_manager("cpu", num_ubatches=2)
    assert "WorkspaceManager already initialized on device cpu" in caplog.text


def test_debug_lines(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("VLLM_DEBUG_WORKSPACE", "1")
    caplog.set_level(logging.INFO, logger="arena.compat.vllm")
    m = WorkspaceManager(CPU, num_ubatches=2)
    m.get_simultaneous(((1 << 18,), torch.float32))
    m.lock()
    m.unlock()
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith("[WORKSPACE DEBUG] Resized workspace from 'test_compat_vllm.py:")
        and line.endswith("0.00 MB -> 1.00 MB (ubatch 0, lane 0)")
        for line in lines
    ), lines
    assert "[WORKSPACE DEBUG] Workspace locked. Current sizes: [1.0, 1.0]" in lines
    assert "[WORKSPACE DEBUG] Workspace unlocked. Current sizes: [1.0, 1.0]" in lines


def test_persistent_tensors_are_resources_under_vllms_key() -> None:
    m = WorkspaceManager(CPU, num_ubatches=2)
    acc = m.get_persistent("acc", (4,), torch.float32, zero_init=True)

    def never() -> torch.Tensor:
        raise AssertionError("the factory must not run: the tensor exists")

    assert m.get_persistent_resource((torch.Tensor, "acc"), never) is acc
    # The other direction: a tensor registered under vLLM's key is what get_persistent returns.
    mine = torch.full((3,), 7.0)
    assert m.get_persistent_resource((torch.Tensor, "mine"), lambda: mine) is mine
    assert m.get_persistent("mine", (3,), torch.float32) is mine
    with pytest.raises(ValueError) as info:
        m.get_persistent("mine", (3,), torch.float16)
    assert str(info.value) == (
        "Persistent workspace 'mine' has shape=torch.Size([3]), dtype=torch.float32; "
        "requested shape=(3,), dtype=torch.float16."
    )
    m.lock()
    assert m.get_persistent_resource((torch.Tensor, "acc"), never) is acc
    assert m.get_persistent("acc", (4,), torch.float32) is acc


STAND_IN_UBATCHING = """
import threading

_THREAD_ID_TO_CONTEXT: dict = {}


def dbo_enabled() -> bool:
    return len(_THREAD_ID_TO_CONTEXT) > 0


def dbo_current_ubatch_id() -> int:
    if len(_THREAD_ID_TO_CONTEXT) == 0:
        return 0
    return _THREAD_ID_TO_CONTEXT[threading.get_ident()]
"""


@pytest.fixture
def stand_in_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A minimal ``vllm`` package with vLLM's ubatching thread map, on ``sys.path``."""
    package = tmp_path / "vllm" / "v1" / "worker"
    package.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "v1", package):
        (folder / "__init__.py").write_text("")
    (package / "ubatching.py").write_text(STAND_IN_UBATCHING)
    assert "vllm" not in sys.modules, "a real vLLM is loaded in this test process"
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def test_dbo_threads_use_vllms_thread_map(stand_in_vllm: Path) -> None:
    # The manager exists before vLLM's module is imported: the map is found at call time.
    m = WorkspaceManager(CPU, num_ubatches=2)
    ubatching = importlib.import_module("vllm.v1.worker.ubatching")
    assert ubatching.__file__ is not None and ubatching.__file__.startswith(str(stand_in_vllm))
    assert ws.dbo_current_ubatch_id() == 0  # no DBO running
    registered = threading.Barrier(2)
    written = threading.Barrier(2)
    seen: dict[int, tuple[int, bool]] = {}
    errors: list[BaseException] = []

    def micro_batch(ubatch: int) -> None:
        try:
            ubatching._THREAD_ID_TO_CONTEXT[threading.get_ident()] = ubatch
            registered.wait(timeout=30)
            for step in range(20):
                (t,) = m.get_simultaneous(((4096,), torch.int32))
                t.fill_(1000 * ubatch + step)
                written.wait(timeout=30)  # both threads wrote before either reads
                clean = bool(torch.all(t == 1000 * ubatch + step))
                seen[ubatch] = (t.data_ptr(), clean and seen.get(ubatch, (0, True))[1])
                written.wait(timeout=30)
        except BaseException as exc:
            errors.append(exc)
            registered.abort()
            written.abort()

    threads = [threading.Thread(target=micro_batch, args=(u,)) for u in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # While the map is in use, vLLM raises for a thread outside it; so does the drop-in.
    with pytest.raises(KeyError):
        ws.dbo_current_ubatch_id()
    assert seen[0][0] != seen[1][0], "both micro-batches got the same buffer"
    assert seen[0][1] and seen[1][1], "a micro-batch saw the other one's bytes"
    ubatching._THREAD_ID_TO_CONTEXT.clear()
    assert ws.dbo_current_ubatch_id() == 0


def test_own_thread_map_is_used_without_vllm() -> None:
    assert "vllm.v1.worker.ubatching" not in sys.modules
    ws._THREAD_ID_TO_CONTEXT[threading.get_ident()] = 1
    assert ws.dbo_current_ubatch_id() == 1


@pytest.mark.gpu
def test_vllm_call_site_on_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.fail("CuPy sees a GPU but torch does not")
    init_workspace_manager(torch.device("cuda", 0), num_ubatches=2)
    before = torch.cuda.memory_allocated(0)
    out = vllm_style_attention(256)
    assert out.device == torch.device("cuda", 0)
    assert torch.cuda.memory_allocated(0) > before  # torch's allocator sees the workspace
    lock_workspace()
    vllm_style_attention(128)
    with pytest.raises(AssertionError, match="Workspace is locked"):
        vllm_style_attention(1 << 16)


def test_a_micro_batch_that_missed_warm_up_gets_its_persistent_tensor_after_lock() -> None:
    m = WorkspaceManager(CPU, num_ubatches=2)
    acc = m.get_persistent("acc", (4,), torch.float32, zero_init=True)
    acc.fill_(3.0)
    m.lock()
    ws._THREAD_ID_TO_CONTEXT[threading.get_ident()] = 1  # the second micro-batch's thread
    mine = m.get_persistent("acc", (4,), torch.float32)
    assert mine.data_ptr() != acc.data_ptr() and torch.all(mine == 0)
    assert m.get_persistent("acc", (4,), torch.float32) is mine
    with pytest.raises(AssertionError, match="was not allocated during warmup"):
        m.get_persistent("never", (4,), torch.float32)
