"""The JAX adapter on CPU JAX: zero-copy, cached imports, x64 and alignment guards."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import arena
from arena import Arena

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture
def shared() -> Arena:
    a = Arena("cpu", framework="numpy")
    yield a
    a.close()


def test_jax_views_are_the_arena_bytes(shared: Arena) -> None:
    specs = (((8, 16), "float32"), ((5,), "int32"), ((3, 3), "bfloat16"))
    host = shared.numpy.get_simultaneous(*specs)
    views = shared.jax.get_simultaneous(*specs)
    for h, j in zip(host, views, strict=True):
        assert isinstance(j, jax.Array)
        assert j.unsafe_buffer_pointer() == shared.numpy.data_ptr(h)
        assert j.shape == h.shape and j.dtype == h.dtype
    host[0][...] = np.arange(128, dtype=np.float32).reshape(8, 16)
    assert float(jnp.sum(views[0])) == float(np.arange(128).sum())


def test_a_copy_would_fail_the_pointer_check(
    monkeypatch: pytest.MonkeyPatch, shared: Arena
) -> None:
    real = jax.dlpack.from_dlpack
    monkeypatch.setattr(jax.dlpack, "from_dlpack", lambda x: jnp.array(real(x)))  # forces a copy
    with pytest.raises(arena.ArenaError, match="copied"):
        shared.jax.get_simultaneous(((64,), "float32"))


def test_unaligned_views_are_refused_instead_of_copied() -> None:
    with Arena("cpu", alignment=32, framework="numpy") as a:
        with pytest.raises(arena.ArenaError, match="alignment>=64"):
            a.jax.get_simultaneous(((8,), "float32"), ((8,), "float32"))
        # 64-byte multiples are fine even with a small alignment
        (x,) = a.jax.get_simultaneous(((16,), "float32"))
        assert x.shape == (16,)


def test_64_bit_dtypes_without_x64_name_the_flag(shared: Arena) -> None:
    if jax.config.read("jax_enable_x64"):
        pytest.skip("x64 is enabled in this process")
    for dtype in ("int64", "float64", "uint64", "complex128"):
        with pytest.raises(arena.DTypeError, match="jax_enable_x64"):
            shared.jax.get_simultaneous(((4,), dtype))


def test_repeated_requests_reuse_imports_until_the_buffer_changes(
    monkeypatch: pytest.MonkeyPatch, shared: Arena
) -> None:
    calls = []
    real = jax.dlpack.from_dlpack

    def counting(x: object) -> object:
        calls.append(1)
        return real(x)

    monkeypatch.setattr(jax.dlpack, "from_dlpack", counting)
    specs = (((32,), "float32"), ((4, 4), "float16"))
    first = shared.jax.get_simultaneous(*specs)
    for _ in range(50):
        again = shared.jax.get_simultaneous(*specs)
        assert all(a is b for a, b in zip(first, again, strict=True))
    assert len(calls) == 2
    shared.numpy.get_simultaneous(((1 << 16,), "float32"))  # growth: new buffer
    moved = shared.jax.get_simultaneous(*specs)
    assert len(calls) == 4
    assert moved[0].unsafe_buffer_pointer() != first[0].unsafe_buffer_pointer()
    shared.close()
    gc.collect()
    assert float(jnp.sum(first[0])) == float(jnp.sum(first[0]))  # old memory still alive


def test_write_into_puts_a_jax_result_into_the_arena(shared: Arena) -> None:
    from arena.adapters import jax as jax_adapter

    (out,) = shared.jax.get_simultaneous(((4, 4), "float32"))
    result = jnp.arange(16, dtype=jnp.float32).reshape(4, 4) * 2
    assert jax_adapter.write_into(out, result) is out
    (host,) = shared.numpy.get_simultaneous(((4, 4), "float32"))
    assert np.array_equal(host, np.arange(16).reshape(4, 4) * 2)
    assert float(jnp.sum(out)) == float(np.sum(host))


def test_jax_persistent_buffer(shared: Arena) -> None:
    p = shared.jax.get_persistent("table", (8,), "float32", zero_init=True)
    assert float(jnp.sum(p)) == 0.0
    assert shared.jax.get_persistent("table", (8,), "float32") is p


def test_out_of_memory_hint_names_jax_preallocation(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.ledger import oom_hint

    cuda = arena.Device("cuda", 0)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in oom_hint(cuda)
    assert oom_hint(arena.CPU) == ""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    assert oom_hint(cuda) == ""


@pytest.mark.gpu
def test_jax_views_of_device_memory_are_zero_copy() -> None:
    cupy = pytest.importorskip("cupy")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.fail("CuPy sees a GPU but JAX has no GPU backend (install jax[cuda])")
    from arena.adapters import jax as jax_adapter

    with Arena("cuda:0", framework="cupy") as a:
        specs = (((64, 32), "float32"), ((100,), "int32"))
        c = a.cupy.get_simultaneous(*specs)
        j = a.jax.get_simultaneous(*specs)
        for cv, jv in zip(c, j, strict=True):
            assert jv.unsafe_buffer_pointer() == a.cupy.data_ptr(cv)
            assert next(iter(jv.devices())).platform == "gpu"
        c[0][...] = 2.0
        cupy.cuda.get_current_stream().synchronize()
        assert float(jnp.sum(j[0])) == 2.0 * 64 * 32
        (out,) = a.jax.get_simultaneous(((8,), "float32"))
        jax_adapter.write_into(out, jnp.arange(8, dtype=jnp.float32))
        (seen,) = a.cupy.get_simultaneous(((8,), "float32"))
        assert seen.get().tolist() == list(range(8))
