"""CUDA paths: device, pool, torch and pinned sources; CuPy and torch views on the GPU;
CUDA-graph capture and replay. Marked ``gpu``: skipped without a CUDA device, failures
with ``ARENA_REQUIRE_GPU=1``."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import arena
from arena import Arena, ArenaLockedError, DeviceUnavailableError, GraphCaptureError
from arena.memory.devices import cuda_device_count

gpu = pytest.mark.gpu
MiB = 1 << 20


def _cupy() -> Any:
    return pytest.importorskip("cupy")


def _torch_cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.fail("CuPy sees a GPU but torch.cuda.is_available() is False")
    return torch


# ---------------------------------------------------------------- without a GPU (CPU CI)
def test_cuda_arena_without_gpu_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    if cuda_device_count() > 0:
        pytest.skip("a GPU is visible")
    with pytest.raises(DeviceUnavailableError, match="device='cpu'"):
        Arena("cuda:0")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "cupy" else real_find_spec(name, *a),
    )
    with pytest.raises(DeviceUnavailableError, match=r"pip install cupy-cuda12x"):
        Arena("cuda")


def test_pinned_source_without_gpu_is_refused_clearly() -> None:
    if cuda_device_count() > 0:
        pytest.skip("a GPU is visible")
    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        Arena("cpu", source="pinned")


# ---------------------------------------------------------------- sources
@gpu
def test_device_source_growth_never_holds_old_plus_new() -> None:
    cupy = _cupy()
    n = 256 * MiB
    with Arena("cuda:0", source="device", framework="cupy") as a:
        a.get_simultaneous(((n,), "uint8"))
        cupy.cuda.runtime.deviceSynchronize()
        free_before, _ = cupy.cuda.runtime.memGetInfo()
        a.get_simultaneous(((2 * n,), "uint8"))
        cupy.cuda.runtime.deviceSynchronize()
        free_after, _ = cupy.cuda.runtime.memGetInfo()
        # old N went back to the driver before 2N was taken: net use grew by about N
        assert free_before - free_after < n + 64 * MiB, (free_before - free_after) / MiB
        assert a.stats().frees == 1


@gpu
def test_pool_source_uses_cupys_current_allocator() -> None:
    cupy = _cupy()
    pool = cupy.get_default_memory_pool()
    used = pool.used_bytes()
    with Arena("cuda:0", source="pool", framework="cupy") as a:
        a.get_simultaneous(((8 * MiB,), "uint8"))
        assert pool.used_bytes() >= used + 8 * MiB


@gpu
def test_torch_source_is_seen_by_torch_memory_stats() -> None:
    torch = _torch_cuda()
    before = torch.cuda.memory_allocated(0)
    with Arena("cuda:0", source="torch", framework="torch") as a:
        (x,) = a.get_simultaneous(((4 * MiB,), torch.float32))
        assert torch.cuda.memory_allocated(0) >= before + 16 * MiB
        x.fill_(1.0)
        assert float(x.sum()) == 4 * MiB


@gpu
def test_pinned_source_gives_page_locked_host_views() -> None:
    cupy = _cupy()
    with Arena("cpu", source="pinned", framework="numpy") as a:
        (host,) = a.get_simultaneous(((1024,), "float32"))
        host[:] = np.arange(1024)
        attributes = cupy.cuda.runtime.pointerGetAttributes(a.numpy.data_ptr(host))
        assert attributes.type == cupy.cuda.runtime.memoryTypeHost
        device = cupy.empty(1024, dtype=cupy.float32)
        device.set(host)
        assert float(device.sum()) == float(np.arange(1024).sum())


@gpu
def test_every_operation_happens_on_the_arena_device() -> None:
    cupy = _cupy()
    if cuda_device_count() < 2:
        pytest.skip(
            "needs two CUDA devices: with one, the arena's device is always the current "
            "one, so this check could not fail"
        )
    index = cuda_device_count() - 1
    with cupy.cuda.Device(0), Arena(f"cuda:{index}", framework="cupy") as a:
        (x,) = a.get_simultaneous(((16,), "float32"))
        assert x.device.id == index
        assert a.get_persistent("p", (4,), "float32").device.id == index


@gpu
def test_registry_keeps_one_arena_per_device_and_defaults_to_gpu() -> None:
    gpu_arena = arena.init_arena("cuda:0", framework="cupy")
    host_arena = arena.init_arena("cpu", framework="numpy")
    assert arena.current_arena() is gpu_arena  # the default device is the GPU
    assert arena.current_arena(0) is gpu_arena
    assert arena.current_arena("cpu") is host_arena
    assert Arena().device == arena.Device("cuda", 0)


@gpu
def test_out_of_memory_on_device_is_an_arena_memory_error() -> None:
    _cupy()
    with Arena("cuda:0", framework="cupy") as a:
        with pytest.raises(arena.ArenaOutOfMemoryError, match="bytes"):
            a.get_simultaneous(((1 << 50,), "uint8"))
        assert a.get_simultaneous(((16,), "uint8"))[0].size == 16


# ---------------------------------------------------------------- views
@gpu
def test_cupy_and_torch_views_share_bytes_on_the_gpu() -> None:
    cupy = _cupy()
    torch = _torch_cuda()
    with Arena("cuda:0", framework="cupy") as a:
        specs = (((64, 32), "float32"), ((100,), "int32"))
        c = a.cupy.get_simultaneous(*specs)
        t = a.torch.get_simultaneous(*specs)
        for cv, tv in zip(c, t, strict=True):
            assert a.cupy.data_ptr(cv) == tv.data_ptr()
            assert tv.device == torch.device("cuda", 0)
        c[0][...] = 3.0
        cupy.cuda.get_current_stream().synchronize()
        assert float(t[0].sum()) == 3.0 * 64 * 32
        t[1].copy_(torch.arange(100, dtype=torch.int32, device="cuda"))
        torch.cuda.synchronize()
        assert int(c[1].sum()) == sum(range(100))
        assert a.cupy.data_ptr(c[1]) % 256 == 0


@gpu
def test_cupy_low_precision_dtypes_work_or_explain() -> None:
    _cupy()
    with Arena("cuda:0", framework="cupy") as a:
        with pytest.raises(arena.DTypeError, match=r"uint8|torch"):
            a.cupy.get_simultaneous(((4,), "float8_e4m3fn"))
        try:
            (b,) = a.cupy.get_simultaneous(((4,), "bfloat16"))
        except arena.DTypeError as exc:
            assert "uint16" in str(exc)
        else:
            assert b.dtype.itemsize == 2
        torch = _torch_cuda()
        (f8,) = a.torch.get_simultaneous(((4,), torch.float8_e4m3fn))
        assert f8.dtype == torch.float8_e4m3fn


# ---------------------------------------------------------------- CUDA graphs
@gpu
def test_cupy_graph_capture_lock_and_replay() -> None:
    cupy = _cupy()
    with Arena("cuda:0", framework="cupy") as a:
        specs = (((1024,), "float32"), ((1024,), "float32"))
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            x, y = a.get_simultaneous(*specs)  # warm-up: sizes the slot eagerly
            cupy.multiply(x, 2.0, out=y)
            stream.synchronize()
            pointers = (a.cupy.data_ptr(x), a.cupy.data_ptr(y))
            stream.begin_capture()
            x, y = a.get_simultaneous(*specs)  # fits: no allocation during capture
            cupy.multiply(x, 2.0, out=y)
            graph = stream.end_capture()
        a.lock()
        for step in range(3):
            x, y = a.get_simultaneous(*specs)
            assert (a.cupy.data_ptr(x), a.cupy.data_ptr(y)) == pointers
            x.set(np.full(1024, step + 1, dtype=np.float32), stream=stream)
            graph.launch(stream)
            stream.synchronize()
            assert float(y.get().sum()) == 2.0 * (step + 1) * 1024


@gpu
def test_growth_while_capturing_raises_instead_of_corrupting() -> None:
    cupy = _cupy()
    with Arena("cuda:0", framework="cupy") as a:
        a.get_simultaneous(((16,), "float32"))
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                with pytest.raises(GraphCaptureError, match="capturing"):
                    a.get_simultaneous(((1 << 20,), "float32"))
            finally:
                stream.end_capture()
        assert a.stats().slots[0].capacity == 256  # nothing changed


@gpu
def test_growth_while_a_blocking_cupy_stream_captures_is_refused() -> None:
    """A blocking stream's capture makes the legacy stream unusable; the probe must say
    "capturing" instead of letting cudaErrorStreamCaptureImplicit escape."""
    cupy = _cupy()
    if importlib.util.find_spec("torch") is not None:
        _torch_cuda().zeros(1, device="cuda")  # torch's CUDA state initialised: asked too
    with Arena("cuda:0", framework="cupy") as a:
        a.get_simultaneous(((16,), "float32"))
        stream = cupy.cuda.Stream()  # blocking
        with stream:
            stream.begin_capture()
            try:
                with pytest.raises(GraphCaptureError, match="capturing"):
                    a.get_simultaneous(((1 << 20,), "float32"))
            finally:
                stream.end_capture()
        assert a.stats().slots[0].capacity == 256


@gpu
def test_torch_source_and_cupy_views_share_bytes() -> None:
    cupy = _cupy()
    torch = _torch_cuda()
    with Arena("cuda:0", source="torch", framework="torch") as a:
        (t,) = a.get_simultaneous(((256,), torch.float32))
        (c,) = a.cupy.get_simultaneous(((256,), "float32"))
        assert a.cupy.data_ptr(c) == t.data_ptr()
        t.fill_(2.0)
        torch.cuda.synchronize()
        assert float(c.sum()) == 512.0
        a.get_simultaneous(((1 << 20,), torch.float32))  # growth: released in stream order
        cupy.cuda.runtime.deviceSynchronize()


@gpu
def test_torch_cuda_graph_with_arena_views() -> None:
    torch = _torch_cuda()
    with Arena("cuda:0", framework="torch") as a:
        specs = (((256, 64), torch.float16), ((256, 64), torch.float16))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up on a side stream, as torch's docs ask
                x, y = a.get_simultaneous(*specs)
                torch.mul(x, 3, out=y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x, y = a.get_simultaneous(*specs)
            torch.mul(x, 3, out=y)
        a.lock()
        pointers = (x.data_ptr(), y.data_ptr())
        for value in (1.0, 2.0):
            xs, ys = a.get_simultaneous(*specs)
            assert (xs.data_ptr(), ys.data_ptr()) == pointers
            xs.fill_(value)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.all(ys == 3 * value)
        with pytest.raises(ArenaLockedError):
            a.get_simultaneous(((1 << 24,), torch.float16))


@gpu
def test_steps_and_scopes_under_a_captured_graph_replay_the_planned_pointers() -> None:
    """Warm up a step twice (record, plan), capture it inside a scope, lock, replay: the
    replay reads and writes the planned bytes, and eager replays of the step after lock
    get the very pointers the graph baked in."""
    torch = _torch_cuda()
    with Arena("cuda:0", framework="torch") as a:
        f16 = torch.float16

        def layer() -> tuple[Any, Any, list[int]]:
            with a.scope() as outer:
                (residual,) = outer.get_simultaneous(((128, 256), f16))
                with a.step("layer") as st:
                    (h,) = st.get_simultaneous(((128, 1024), f16))
                    (y,) = st.get_simultaneous(((128, 256), f16))
                    torch.mul(residual, 2, out=h[:, :256])
                    st.release(h)
                    (z,) = st.get_simultaneous(((128, 256), f16))
                    torch.add(y, 1, out=z)
                    pointers = [v.data_ptr() for v in (residual, h, y, z)]
                return residual, z, pointers

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer()  # records
            layer()  # plans
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            residual, _, captured = layer()
        a.lock()
        assert layer()[2] == captured  # eager, locked: the planned pointers
        residual.fill_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        assert a.stats().allocations_while_locked == 0
        assert a.stats().slots[0].capacity_over_load <= 1.05


def test_a_cuda_arena_without_a_gpu_says_first_that_no_device_is_visible() -> None:
    from arena.memory.devices import cuda_device_count

    if cuda_device_count() > 0 or importlib.util.find_spec("cupy") is not None:
        pytest.skip("needs a machine without CuPy and without a CUDA device")
    with pytest.raises(arena.DeviceUnavailableError) as info:
        arena.Arena("cuda")
    message = str(info.value)
    # small46: names the caller's spelling ("cuda") next to the device it was read as.
    assert message.startswith("cuda:0 (device='cuda') is not available: no CUDA device is visible")
    assert message.index("device='cpu'") < message.index("pip install")
