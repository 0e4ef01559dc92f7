"""Triton's allocator in every thread (issue 30, items 1 and 5).

Triton keeps its allocator in a ContextVar (``triton.runtime._allocation``): CI runs
without Triton, so a stand-in module with a real ContextVar and Triton's launcher code
(``allocate_scratch`` of its CUDA driver) plays Triton here; the last test runs a real
kernel in Triton's interpreter where Triton is installed."""

from __future__ import annotations

import contextvars
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest

import arena
from arena.compat import vllm
from tests.sources import RecordingSource
from tests.tma import tma_copy_kernel

pytest.importorskip("torch")


class NullAllocator:
    """Triton's default: raises at the first launch that needs scratch."""

    def __call__(self, size: int, alignment: int, stream: Any) -> Any:
        raise RuntimeError(
            "Kernel requires a runtime memory allocation, but no allocator was set. "
            "Use triton.set_allocator to specify an allocator."
        )


@pytest.fixture
def triton_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """``triton`` and ``triton.runtime._allocation`` as Triton 3.x defines them."""
    allocation = types.ModuleType("triton.runtime._allocation")
    allocation.NullAllocator = NullAllocator  # type: ignore[attr-defined]
    allocation._allocator = contextvars.ContextVar(  # type: ignore[attr-defined]
        "_allocator",
        default=NullAllocator(),  # noqa: B039 (Triton's own definition)
    )

    def set_allocator(allocator: Any) -> None:
        allocation._allocator.set(allocator)  # type: ignore[attr-defined]

    allocation.set_allocator = set_allocator  # type: ignore[attr-defined]
    runtime = types.ModuleType("triton.runtime")
    runtime._allocation = allocation  # type: ignore[attr-defined]
    triton = types.ModuleType("triton")
    triton.runtime = runtime  # type: ignore[attr-defined]
    triton.set_allocator = set_allocator  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.runtime", runtime)
    monkeypatch.setitem(sys.modules, "triton.runtime._allocation", allocation)
    previous = threading.getprofile()
    yield allocation
    threading.setprofile(previous)  # install() hooked thread starts: leave none behind


def launch(allocation: types.ModuleType, grid: int, scratch: int, stream: int = 7) -> int:
    """Triton's launcher (``allocate_scratch`` in its CUDA driver): the pointer it gets."""
    alloc_size = grid * scratch
    alloc_fn = allocation._allocator.get()
    return int(alloc_fn(alloc_size, 128, stream).data_ptr())


def in_thread(target: Any, *args: Any) -> Any:
    """Run ``target(*args)`` in a new thread; its result, or its exception raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = target(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def test_install_sets_it_in_the_current_context(triton_module: types.ModuleType) -> None:
    with arena.Arena("cpu", framework="torch") as ws:
        allocator = ws.triton_allocator()
        assert not allocator.installed
        allocator.install()
        assert allocator.installed
        assert triton_module._allocator.get() is allocator
        launch(triton_module, 4, 256)
        assert ws.stats().slots[0].triton_bytes >= 1024


def test_a_thread_started_after_install_gets_it_before_touching_the_arena(
    triton_module: types.ModuleType,
) -> None:
    with arena.Arena("cpu", framework="torch") as ws:
        ws.triton_allocator().install()
        pointer = in_thread(launch, triton_module, 4, 256)
        assert pointer == launch(triton_module, 4, 256)  # the same block: one slot, one stream


def test_vllms_microbatch_threads_each_get_their_own_slot(
    triton_module: types.ModuleType,
) -> None:
    """vLLM's dual-batch overlap: one thread per micro-batch, started per forward pass after
    the engine installed the allocator, registered in the thread map; a Triton kernel runs
    before the thread's first workspace request."""
    vllm.init_workspace_manager("cpu", num_ubatches=2)
    try:
        manager = vllm.current_workspace_manager()
        manager.arena.triton_allocator().install()
        ready = threading.Barrier(2)
        pointers: dict[int, int] = {}

        def ubatch_thread(ubatch: int) -> None:
            vllm._THREAD_ID_TO_CONTEXT[threading.get_ident()] = ubatch
            try:
                ready.wait()
                pointers[ubatch] = launch(triton_module, 8, 512)  # before any request
                manager.get_simultaneous(((64,), __import__("torch").float32))
            finally:  # as vLLM's threads leave its map: later tests see no overlap running
                del vllm._THREAD_ID_TO_CONTEXT[threading.get_ident()]

        threads = [threading.Thread(target=ubatch_thread, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(pointers) == [0, 1] and pointers[0] != pointers[1]
        assert [s.triton_bytes >= 4096 for s in manager.arena.stats().slots] == [True, True]
    finally:
        vllm.reset_workspace_manager()


def test_a_thread_started_before_install_gets_it_when_it_binds(
    triton_module: types.ModuleType,
) -> None:
    with arena.Arena("cpu", framework="torch", ubatches=2) as ws:
        started, installed = threading.Event(), threading.Event()
        outcome: dict[str, Any] = {}

        def worker() -> None:
            started.set()
            installed.wait()
            try:
                launch(triton_module, 1, 256)
            except arena.NotInitializedError as exc:
                outcome["error"] = str(exc)
            ws.bind_ubatch(1)
            outcome["pointer"] = launch(triton_module, 1, 256)

        thread = threading.Thread(target=worker)
        thread.start()
        started.wait()
        ws.triton_allocator().install()
        installed.set()
        thread.join()
        assert "no allocator was set" in outcome["error"]  # Triton's words, then the fix
        assert "ws.triton_allocator().install() in this thread" in outcome["error"]
        assert isinstance(triton_module._allocator.get(), type(ws.triton_allocator())) is True
        assert ws.stats().slots[1].triton_bytes >= 256 and ws.stats().slots[0].triton_bytes == 0
        assert isinstance(  # Triton's own isinstance checks still see its NullAllocator
            contextvars.Context().run(triton_module._allocator.get), NullAllocator
        )


def test_an_allocator_installed_from_a_short_lived_thread_stays_installed(
    triton_module: types.ModuleType,
) -> None:
    """The installing thread's context dies with it; the arena keeps its allocator, so
    threads started later, and threads that bind, still get it."""
    import gc

    with arena.Arena("cpu", framework="torch", ubatches=2) as ws:
        in_thread(lambda: ws.triton_allocator().install())
        gc.collect()
        assert in_thread(launch, triton_module, 1, 256) > 0

        def bound() -> int:
            ws.bind_ubatch(1)
            return launch(triton_module, 1, 256)

        assert in_thread(bound) > 0
        assert [s.triton_blocks for s in ws.stats().slots] == [1, 1]


def test_an_installed_arena_dropped_unclosed_gives_its_blocks_back(
    triton_module: types.ModuleType,
) -> None:
    source = RecordingSource()
    ws = arena.Arena(source=source, framework="torch")
    ws.triton_allocator().install()
    launch(triton_module, 1, 256)
    ws.get_simultaneous(((64,), "float32"))
    assert len(source.live) == 2
    del ws  # no gc.collect(): the arena's own collection closes it
    assert source.live == {}


def test_a_closed_arenas_allocator_reaches_no_new_thread(
    triton_module: types.ModuleType,
) -> None:
    ws = arena.Arena("cpu", framework="torch")
    ws.triton_allocator().install()
    ws.close()
    with pytest.raises(arena.NotInitializedError, match="install"):
        in_thread(launch, triton_module, 1, 256)


def test_install_without_triton_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.runtime", None)
    monkeypatch.setitem(sys.modules, "triton.runtime._allocation", None)
    with arena.Arena("cpu", framework="torch") as ws:
        allocator = ws.triton_allocator()
        with pytest.raises(arena.FrameworkUnavailableError, match="pip install triton"):
            allocator.install()
        assert not allocator.installed


def test_install_hands_new_threads_to_the_profile_hook_set_before(
    triton_module: types.ModuleType,
) -> None:
    seen: list[str] = []

    def profiler(frame: Any, event: str, arg: Any) -> None:
        seen.append(event)
        sys.setprofile(None)

    threading.setprofile(profiler)
    with arena.Arena("cpu", framework="torch") as ws:
        ws.triton_allocator().install()
        in_thread(launch, triton_module, 1, 256)
    assert seen  # the earlier hook still ran in the new thread


def test_lock_gives_every_microbatch_triton_blocks_like_the_largest_sibling() -> None:
    with arena.Arena("cpu", framework="torch", ubatches=3) as ws:
        allocate = ws.triton_allocator()
        with ws.ubatch(0):
            allocate(4096, 128, 7)
            allocate(16384, 128, 7)  # a larger grid: the block grows
        with ws.ubatch(1):
            allocate(1024, 128, 7)  # ran, with a smaller grid
        planned = ws.planned_bytes()
        ws.lock()
        assert ws.memory_stats()["reserved_bytes.all.current"] == planned
        assert [s.triton_bytes >= 16384 for s in ws.stats().slots] == [True] * 3
        with ws.ubatch(1):
            allocate(16384, 128, 7)  # the largest grid, never seen here: served
        with ws.ubatch(2):  # never ran a Triton kernel; its own stream takes lock()'s block
            pointer = allocate(16384, 128, 9).data_ptr()
            assert allocate(16384, 128, 9).data_ptr() == pointer
            with pytest.raises(arena.ArenaLockedError, match="Triton"):
                allocate(16384, 128, 11)  # a second new stream: nothing left to take
        with ws.ubatch(0), pytest.raises(arena.ArenaLockedError, match="Triton"):
            allocate(16384, 128, 9)  # ubatch 0's block is its stream 7's: never lent


def test_a_block_lock_made_for_a_stream_is_not_lent_once_that_stream_used_it() -> None:
    with arena.Arena("cpu", framework="torch", ubatches=2) as ws:
        allocate = ws.triton_allocator()
        with ws.ubatch(0):
            allocate(4096, 128, 7)
        ws.lock()
        with ws.ubatch(1):
            allocate(4096, 128, 7)  # its stream 7 uses the block lock() made
            with pytest.raises(arena.ArenaLockedError, match="Triton"):
                allocate(4096, 128, 9)  # so another stream may not take it


def test_real_triton_in_its_interpreter_uses_arena_scratch_from_a_new_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Triton installed: Triton's own ContextVar reaches a thread started after
    install(), and a kernel run in Triton's CPU interpreter reads and writes arena memory
    through the block the allocator gives (the interpreter calls no allocator itself, so
    the test asks for the scratch as Triton's launcher does)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    import torch
    import triton.language as tl
    from triton.runtime import _allocation

    @triton.jit  # type: ignore[untyped-decorator]
    def twice(src, scratch, dst, n: tl.constexpr) -> None:  # type: ignore[no-untyped-def]
        offsets = tl.arange(0, n)
        tl.store(scratch + offsets, tl.load(src + offsets) * 2)
        tl.store(dst + offsets, tl.load(scratch + offsets) + 1)

    previous = threading.getprofile()
    token = _allocation._allocator.set(_allocation._allocator.get())
    try:
        with arena.Arena("cpu", framework="torch") as ws:
            ws.triton_allocator().install()
            src, dst = ws.torch.get_simultaneous(((64,), torch.float32), ((64,), torch.float32))
            src.copy_(torch.arange(64, dtype=torch.float32))

            def run() -> int:
                allocate = _allocation._allocator.get()  # what Triton's launcher reads
                scratch = allocate(64 * 4, 16, None).view(torch.float32)
                twice[(1,)](src, scratch, dst, 64)
                return int(scratch.data_ptr())

            pointer = in_thread(run)
            assert dst.tolist() == [2 * i + 1 for i in range(64)]
            (segment,) = [
                s
                for s in ws.memory_snapshot()["segments"]
                if s["frames"][0]["name"].endswith("triton")
            ]
            assert segment["address"] <= pointer < segment["address"] + segment["total_size"]
    finally:
        _allocation._allocator.reset(token)
        threading.setprofile(previous)


@pytest.mark.gpu
def test_a_real_tma_kernel_in_two_microbatch_threads_started_after_install() -> None:
    """On a GPU with Triton: a kernel that makes TMA descriptors on the device (global
    scratch) runs in two micro-batch threads started after install(), each on a stream of
    its own; each thread's scratch comes from its micro-batch's slot."""
    copy = tma_copy_kernel()
    import torch
    from triton.runtime import _allocation

    previous = threading.getprofile()
    token = _allocation._allocator.set(_allocation._allocator.get())
    try:
        with arena.Arena("cuda:0", framework="torch", ubatches=2) as ws:
            ws.triton_allocator().install()
            results: dict[int, bool] = {}

            def ubatch_thread(ubatch: int) -> None:
                ws.bind_ubatch(ubatch)
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    x = torch.randn(64, 64, device="cuda:0")
                    y = torch.empty_like(x)
                    copy[(2, 2)](x, y, 64, 64, block_m=32, block_n=32)
                stream.synchronize()
                results[ubatch] = bool(torch.equal(x, y))

            threads = [threading.Thread(target=ubatch_thread, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert results == {0: True, 1: True}
            assert [s.triton_blocks for s in ws.stats().slots] == [1, 1]
    finally:
        _allocation._allocator.reset(token)
        threading.setprofile(previous)


# ---------------------------------------------------------------- mutation gaps (rerun 5)
class _Recorder:
    """A profile hook that records the first events it sees: (event, code name, arg)."""

    def __init__(self, count: int = 6) -> None:
        self.count = count
        self.seen: list[tuple[str, str, str]] = []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if len(self.seen) < self.count:
            name = getattr(getattr(frame, "f_code", None), "co_name", "?")
            self.seen.append((event, name, repr(arg)))


def _work() -> int:
    return sum(range(3))


def test_install_hands_new_threads_every_event_of_the_profile_hook_set_before(
    triton_module: types.ModuleType,
) -> None:
    # triton.py _thread_start #2 (the earlier hook not installed in the thread: it saw the
    # first event only), #7 (it missed the first event), #9, #10, #11 (the first event
    # passed on without its frame, its name or its argument).
    # A profiled thread first: CPython 3.12 on (PEP 669) instruments the code a profile hook
    # ran over and keeps it so, and from then on every new thread's hook also sees the
    # c_return of the setprofile call in threading's _bootstrap_inner, arena or not. The
    # reference and the run with arena then start from the same state.
    threading.setprofile(_Recorder())  # the fixture restores the hook found before
    in_thread(_work)
    plain = _Recorder()
    threading.setprofile(plain)
    in_thread(_work)
    assert len(plain.seen) == plain.count
    hooked = _Recorder()
    threading.setprofile(hooked)
    with arena.Arena("cpu", framework="torch") as ws:
        ws.triton_allocator().install()
        in_thread(_work)
    assert hooked.seen == plain.seen


def test_a_thread_started_after_the_installed_arena_is_gone_starts_cleanly(
    triton_module: types.ModuleType,
) -> None:
    # triton.py _install #6: with the installed allocator collected, the hook of a new
    # thread read the closed-state of None (an AttributeError in the thread).
    import gc

    ws = arena.Arena("cpu", framework="torch")
    allocator = ws.triton_allocator()
    in_thread(allocator.install)  # installed in a thread: no living context holds it
    ws.close()
    del ws, allocator
    gc.collect()
    assert in_thread(lambda: 42) == 42


def test_the_fix_is_added_once_to_tritons_message_and_the_class_keeps_its_module(
    triton_module: types.ModuleType,
) -> None:
    # triton.py _explain_missing #5, #6, #12, #13, #28 to #30 (each install wrapped
    # Triton's default again: the fix appeared twice or more), #31, #32 (the subclass
    # named arena's module as its own).
    with (
        arena.Arena("cpu", framework="torch") as first,
        arena.Arena("cpu", framework="torch") as second,
    ):
        first.triton_allocator().install()
        second.triton_allocator().install()
        first.triton_allocator().install()
    default = contextvars.Context().run(triton_module._allocator.get)
    assert isinstance(default, NullAllocator)
    assert type(default).__module__ == NullAllocator.__module__
    assert type(default).__name__ == "NullAllocator"
    with pytest.raises(arena.NotInitializedError) as caught:
        default(64, 128, 7)
    message = str(caught.value)
    assert message.startswith("Kernel requires a runtime memory allocation")
    assert message.count("This thread has no arena allocator") == 1


def test_a_grown_triton_block_is_announced_with_the_bytes_it_had() -> None:
    # triton.py TritonAllocator._grow #43, #44: the event of a growth said the block had
    # held 0 (or 1) bytes.
    events: list[tuple[int, int]] = []
    with arena.Arena("cpu", framework="torch") as ws:
        ws.add_listener(
            lambda e: events.append((e.old_bytes, e.new_bytes)) if e.kind == "triton" else None
        )
        allocate = ws.triton_allocator()
        allocate(1024, 16, 7)
        allocate(1 << 20, 16, 7)
    assert len(events) == 2
    (old0, new0), (old1, new1) = events
    assert old0 == 0 and new0 >= 1024
    assert old1 == new0 and new1 >= 1 << 20
