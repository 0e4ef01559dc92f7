"""A scratch callback whose computation JAX runs elsewhere than the arena's memory: a
host arena's callback in a computation on a GPU (JAX's default device there; the first
GPU run's docs example and five tests failed so, on "Buffer.__array__ is only
supported on CPU"). When ``fn`` fails there, the error says where each side is and
names the fix. On the CPU the GPU computation is played by a context whose ``stream``
reads (XLA's stream), as it does on a GPU."""

from __future__ import annotations

import sys
from typing import Any

import arena.adapters
import numpy as np
import pytest

import arena
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import HostMemoryAsCuda, fake_cupy, install

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytest.importorskip("jax.experimental.buffer_callback")


class _GpuContext:
    stream = 0x7F00  # XLA's stream: readable only on a GPU


class _GpuBuffer:
    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("UNIMPLEMENTED: Buffer.__array__ is only supported on CPU.")


def _as_if_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``buffer_callback`` replaced by one that calls back at once, with a GPU's context."""
    from jax.experimental import buffer_callback as module

    def buffer_callback(run: Any, result_shape_dtypes: Any, **_: Any) -> Any:
        def call(*inputs: Any) -> Any:
            run(_GpuContext(), [_GpuBuffer()], *inputs)
            return jnp.zeros(result_shape_dtypes.shape, result_shape_dtypes.dtype)

        return call

    monkeypatch.setattr(module, "buffer_callback", buffer_callback)


def test_a_host_arenas_callback_failing_in_a_gpu_computation_says_where_each_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _as_if_on_a_gpu(monkeypatch)

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        np.asarray(out[0])[...] = 1  # what a host kernel does

    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((4,), "float32")]
        )
        with pytest.raises(arena.ArenaError, match=r"on a GPU .* host memory") as info:
            call(jnp.ones(4))
    message = str(info.value)
    assert "jax.devices('cpu')[0]" in message and "arena.Arena('cuda:0')" in message
    assert "only supported on CPU" in str(info.value.__cause__)  # fn's own error kept


def test_a_callback_that_succeeds_in_a_gpu_computation_is_not_second_guessed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _as_if_on_a_gpu(monkeypatch)
    ran: list[int] = []
    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            lambda ctx, out, x, *, scratch: ran.append(ctx.stream),
            jax.ShapeDtypeStruct((4,), jnp.float32),
            scratch=[((4,), "float32")],
        )
        call(jnp.ones(4))
    assert ran == [0x7F00]


def test_a_failure_where_both_are_on_the_host_is_fns_own() -> None:
    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        raise ValueError("the kernel's own bug")

    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((4,), "float32")]
        )
        with pytest.raises(Exception, match="the kernel's own bug") as info:
            jax.block_until_ready(jax.jit(call)(jnp.ones(4, jnp.float32)))
    assert "JAX runs this computation" not in str(info.value)


class _CpuContext:
    @property
    def stream(self) -> int:
        raise RuntimeError("XLA FFI GPU context is not available")  # as on JAX's CPU


def _as_if_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``buffer_callback`` replaced by one that calls back at once, with the CPU's context
    and host outputs; the outputs."""
    from jax.experimental import buffer_callback as module

    outputs: list[Any] = []

    def buffer_callback(run: Any, result_shape_dtypes: Any, **_: Any) -> Any:
        def call(*inputs: Any) -> None:
            out = np.zeros(result_shape_dtypes.shape, result_shape_dtypes.dtype)
            outputs.append(out)
            run(_CpuContext(), [out], *inputs)

        return call

    monkeypatch.setattr(module, "buffer_callback", buffer_callback)
    return outputs


def _cuda_arena(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An arena on ``cuda:0`` over host memory, with the stand-in CuPy (as
    ``tests/test_front_gaps15a.py``'s), whose scratch views are stand-in CuPy arrays."""
    cupy = with_arrays(fake_cupy())
    install(monkeypatch, cupy=cupy, torch=None)
    monkeypatch.setitem(sys.modules, "arena.adapters.cupy", None)
    del sys.modules["arena.adapters.cupy"]
    monkeypatch.setattr(arena.adapters, "cupy", None, raising=False)
    source = HostMemoryAsCuda(cupy, cupy_owner=True)
    return arena.Arena(source=source, framework="cupy", capture_probe=lambda: False)


def _reads_the_stream(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
    ctx.stream  # noqa: B018 - a GPU kernel launches on XLA's stream


def _refuses_host_buffers(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
    raise TypeError("a GPU kernel's own check: the output is not GPU memory")


@pytest.mark.parametrize(
    ("kernel", "cause"),
    [(_reads_the_stream, "GPU context is not available"), (_refuses_host_buffers, "not GPU")],
)
def test_a_gpu_arenas_callback_failing_in_a_cpu_computation_says_where_each_is(
    monkeypatch: pytest.MonkeyPatch, kernel: Any, cause: str
) -> None:
    """The other side (Round 18a: ``Front.scratch_callback`` #71, ``on_gpu`` not passed,
    left a CUDA arena's callback as if on the host, so fn's own error came through),
    whatever fn raises (a RuntimeError or a TypeError, say)."""
    _as_if_on_the_cpu(monkeypatch)
    with _cuda_arena(monkeypatch) as ws:
        assert ws.device.is_cuda
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((4,), "float32")]
        )
        with pytest.raises(arena.ArenaError, match=r"on the CPU while .* GPU memory") as info:
            call(np.ones(4, np.float32))
    message = str(info.value)
    assert "jax.devices('gpu')[0]" in message and "arena.Arena('cpu')" in message
    assert cause in str(info.value.__cause__)


def test_a_gpu_arenas_callback_failing_in_a_gpu_computation_is_fns_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _as_if_on_a_gpu(monkeypatch)

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        raise ValueError("the kernel's own bug")

    with _cuda_arena(monkeypatch) as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((4,), "float32")]
        )
        with pytest.raises(ValueError, match="the kernel's own bug"):
            call(jnp.ones(4))


def test_a_host_arenas_callback_that_succeeds_on_the_cpu_writes_its_outputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outputs = _as_if_on_the_cpu(monkeypatch)

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        np.asarray(out[0])[...] = np.asarray(x) + 1

    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((2,), jnp.float32), scratch=[((4,), "float32")]
        )
        call(np.array([1, 2], np.float32))
    assert outputs[0].tolist() == [2, 3]


def test_a_scratch_callback_made_without_on_gpu_is_a_host_arenas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ScratchCallback``'s ``on_gpu`` defaults to the host (Round 18a: ``__init__`` #1,
    ``True``: a callback made without it, failing in a CPU computation, was said to be of
    GPU memory)."""
    from arena.adapters.jax import ScratchCallback

    _as_if_on_the_cpu(monkeypatch)

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        raise ValueError("the kernel's own bug")

    call = ScratchCallback(
        kernel,
        jax.ShapeDtypeStruct((4,), jnp.float32),
        (),
        command_buffer_compatible=False,
        input_output_aliases=None,
        locked=lambda: False,
        owns=lambda address: False,
    )
    with pytest.raises(ValueError, match="the kernel's own bug"):
        call(np.ones(4, np.float32))


@pytest.mark.gpu
def test_on_a_gpu_a_host_arenas_callback_in_a_gpu_computation_says_so() -> None:
    """The case itself: JAX computes on its GPU, the arena is on the host."""
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        np.asarray(out)[...] = 1

    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((4,), "float32")]
        )
        x = jax.device_put(jnp.ones(4, jnp.float32), gpus[0])
        with pytest.raises(Exception, match=r"JAX runs this computation on a GPU"):
            jax.block_until_ready(jax.jit(call)(x))
