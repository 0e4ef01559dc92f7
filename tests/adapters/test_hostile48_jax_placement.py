"""A scratch callback failing where JAX computes on the other side from the arena's
memory: the ArenaError that names the fix also says what ``fn`` raised. JAX reports a
callback's error by its formatted last exception only (``INTERNAL: Error when calling
buffer callback: ...``), so a cause chained with ``from`` never reached the user: fn's own
error was lost. On the CPU a GPU arena's callback (``on_gpu=True``) in a CPU computation
plays the mismatch for real through ``jax.jit``."""

from __future__ import annotations

from typing import Any

import pytest

import arena

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytest.importorskip("jax.experimental.buffer_callback")
jax_adapter = pytest.importorskip("arena.adapters.jax")


def _callback(fn: Any, *, on_gpu: bool = True) -> Any:
    """A GPU arena's scratch callback (``on_gpu=False``: a host arena's; no scratch views
    are needed to fail)."""
    return jax_adapter.ScratchCallback(
        fn,
        jax.ShapeDtypeStruct((4,), jnp.float32),
        (),
        command_buffer_compatible=False,
        input_output_aliases=None,
        locked=lambda: False,
        owns=lambda address: False,
        on_gpu=on_gpu,
    )


def test_through_jit_the_hint_and_fns_own_error_both_reach_the_user() -> None:
    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        raise ValueError("the kernel's own bug")

    with pytest.raises(Exception) as info:  # JAX's own runtime error around ours
        jax.block_until_ready(jax.jit(_callback(kernel))(jnp.ones(4, jnp.float32)))
    message = str(info.value)
    assert "JAX runs this computation on the CPU" in message
    assert "fn raised ValueError: the kernel's own bug" in message


class _CpuContext:
    """What XLA passes on the CPU: reading ``stream`` raises."""

    @property
    def stream(self) -> int:
        raise RuntimeError("UNIMPLEMENTED: XLA FFI GPU context is not available")


def _body(fn: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The function a GPU arena's callback gives ``buffer_callback`` (what XLA calls)."""
    from jax.experimental import buffer_callback as module

    captured: list[Any] = []
    monkeypatch.setattr(module, "buffer_callback", lambda run, *a, **k: captured.append(run))
    _callback(fn)
    return captured[0]


def test_fns_own_arena_error_is_named_too(monkeypatch: pytest.MonkeyPatch) -> None:
    def kernel(ctx: Any, out: Any, *, scratch: Any) -> None:
        raise arena.ArenaLockedError("locked, from fn")

    run = _body(kernel, monkeypatch)
    with pytest.raises(arena.ArenaError, match=r"fn raised ArenaLockedError: locked, from fn"):
        run(_CpuContext(), [])


def test_an_interrupt_from_fn_propagates_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    interrupt = KeyboardInterrupt()

    def kernel(ctx: Any, out: Any, *, scratch: Any) -> None:
        raise interrupt

    run = _body(kernel, monkeypatch)
    with pytest.raises(KeyboardInterrupt) as info:
        run(_CpuContext(), [])
    assert info.value is interrupt and info.value.__context__ is None


def test_a_callback_made_without_on_gpu_is_a_host_arenas() -> None:
    """``on_gpu`` defaults to False, a host arena's callback: on the CPU fn's error is its
    own, with no placement hint (Round 18c: ``ScratchCallback.__init__`` #1, ``on_gpu:
    bool = True``, told a CPU computation that the arena's views were GPU memory)."""

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        raise ValueError("the kernel's own bug")

    call = _callback(kernel, on_gpu=False)
    with pytest.raises(Exception, match="the kernel's own bug") as info:
        jax.block_until_ready(jax.jit(call)(jnp.ones(4, jnp.float32)))
    assert "JAX runs this computation" not in str(info.value)
