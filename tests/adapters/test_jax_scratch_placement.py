"""A scratch callback whose computation JAX runs elsewhere than the arena's memory: a
host arena's callback in a computation on a GPU (JAX's default device there; the first
GPU run's docs example and five tests failed so, on "Buffer.__array__ is only
supported on CPU"). When ``fn`` fails there, the error says where each side is and
names the fix. On the CPU the GPU computation is played by a context whose ``stream``
reads (XLA's stream), as it does on a GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import arena

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
