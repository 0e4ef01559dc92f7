"""The JAX adapter on CPU JAX: zero-copy, cached imports, x64 and alignment guards."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import arena
from arena import Arena
from tests.gates import moving_only

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


@moving_only("asserts that growth moves the pointer; in place it stays")
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
        for a, b in zip(first, again, strict=True):
            assert a is not b  # new objects: no host copy cached by an earlier read
            assert a.unsafe_buffer_pointer() == b.unsafe_buffer_pointer()
    assert len(calls) == 2  # ... over buffers imported once
    shared.numpy.get_simultaneous(*specs)[0][...] = 7.0
    shared.numpy.get_simultaneous(((1 << 16,), "float32"))  # growth: new buffer
    moved = shared.jax.get_simultaneous(*specs)
    assert len(calls) == 4
    assert moved[0].unsafe_buffer_pointer() != first[0].unsafe_buffer_pointer()
    shared.close()
    gc.collect()
    assert float(jnp.sum(first[0])) == 7.0 * 32  # the old memory is still alive


def test_write_into_puts_a_jax_result_into_the_arena(shared: Arena) -> None:
    from arena.adapters import jax as jax_adapter

    (out,) = shared.jax.get_simultaneous(((4, 4), "float32"))
    result = jnp.arange(16, dtype=jnp.float32).reshape(4, 4) * 2
    written = jax_adapter.ADAPTER.write_into(out, result)
    assert written.unsafe_buffer_pointer() == out.unsafe_buffer_pointer()
    (host,) = shared.numpy.get_simultaneous(((4, 4), "float32"))
    assert np.array_equal(host, np.arange(16).reshape(4, 4) * 2)
    assert float(jnp.sum(out)) == float(np.sum(host))
    assert np.array_equal(jax.device_get(written), host)


def test_jax_persistent_buffer(shared: Arena) -> None:
    p = shared.jax.get_persistent("table", (8,), "float32", zero_init=True)
    assert float(jnp.sum(p)) == 0.0
    assert shared.jax.get_persistent("table", (8,), "float32") is p


def test_out_of_memory_hint_names_jax_preallocation(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.memory.ledger import oom_hint

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
        jax_adapter.ADAPTER.write_into(out, jnp.arange(8, dtype=jnp.float32))
        (seen,) = a.cupy.get_simultaneous(((8,), "float32"))
        assert seen.get().tolist() == list(range(8))


def _copying_read(view: object) -> None:
    """Cache a host copy on ``view`` as JAX does when a read needs a copy (on a GPU).

    ``ArrayImpl._value`` stores the copy in ``_npy_value`` and serves every later
    ``print``/``tolist``/``device_get``/``__array__`` from it. On CPU the read is
    zero-copy and nothing is cached, so this puts it there as JAX would on a GPU.
    """
    host = np.array(view)  # a real copy of the current bytes
    host.flags.writeable = False
    view._npy_value = host  # type: ignore[attr-defined]


def test_a_repeated_request_never_shows_a_stale_host_copy(shared: Arena) -> None:
    specs = (((16,), "float32"), ((4,), "int32"))
    host, ints = shared.numpy.get_simultaneous(*specs)
    host[...] = 1.0
    ints[...] = 10
    first, _ = shared.jax.get_simultaneous(*specs)
    _copying_read(first)
    host, ints = shared.numpy.get_simultaneous(*specs)
    host[...] = 2.0
    ints[...] = 20
    # The simulation is real: the object that was read keeps showing its old bytes.
    assert first.tolist() == [1.0] * 16
    again, again_ints = shared.jax.get_simultaneous(*specs)
    assert again.tolist() == [2.0] * 16
    assert np.array_equal(jax.device_get(again), np.full(16, 2.0, np.float32))
    assert str(again_ints) == "[20 20 20 20]"
    # write_into: the returned array shows what was written, even over a stale read.
    _copying_read(again)
    written = shared.jax.write_into(again, jnp.full(16, 3.0, jnp.float32))
    assert written.tolist() == [3.0] * 16
    assert np.array_equal(host, np.full(16, 3.0, np.float32))


def test_views_are_uncommitted_so_jit_caches_do_not_double(shared: Arena) -> None:
    f = jax.jit(lambda x: x * 2 + 1)
    buckets = (8, 16, 32, 64, 128, 256, 512)
    for n in buckets:
        (h,) = shared.numpy.get_simultaneous(((n,), "float32"))
        h[...] = np.arange(n)
        (view,) = shared.jax.get_simultaneous(((n,), "float32"))
        assert not view.committed
        ordinary = jnp.arange(n, dtype=jnp.float32)
        assert np.array_equal(f(view), f(ordinary))
    assert f._cache_size() == len(buckets)  # one entry per shape, not two
    # A committed alias, when wanted, is one device_put away and still zero-copy.
    (view,) = shared.jax.get_simultaneous(((8,), "float32"))
    committed = jax.device_put(view, jax.devices("cpu")[0])  # the view's own device
    assert committed.committed
    assert committed.unsafe_buffer_pointer() == view.unsafe_buffer_pointer()


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
def test_write_into_on_every_front(shared: Arena, framework: str) -> None:
    if framework != "numpy":
        pytest.importorskip(framework)
    front = shared.front(framework)
    (view,) = front.get_simultaneous(((2, 3), "float32"))
    seen = front.write_into(view, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert front.data_ptr(seen) == front.data_ptr(view)
    (host,) = shared.numpy.get_simultaneous(((2, 3), "float32"))
    assert host.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


class TorchOwnedHost:
    """A host memory source whose owner is a 1-D uint8 torch tensor, as the torch source
    hands out on CUDA: JAX views must then be built through torch."""

    def __init__(self) -> None:
        self.torch = pytest.importorskip("torch")

    @property
    def device(self) -> arena.Device:
        return arena.CPU

    def allocate(self, nbytes: int) -> arena.Allocation:
        raw = self.torch.empty(nbytes + 4096, dtype=self.torch.uint8)
        start = -raw.data_ptr() % 4096
        block = raw[start : start + nbytes]
        return arena.Allocation(block.data_ptr(), nbytes, block, arena.CPU)

    def release(self, allocation: arena.Allocation) -> None:
        """torch frees the block with its last view."""


def test_jax_views_of_a_torch_owned_buffer() -> None:
    source = TorchOwnedHost()
    with Arena(source=source, framework="torch") as a:
        specs = (((8, 4), "float32"), ((3,), "int32"), ((5,), "bfloat16"))
        t = a.torch.get_simultaneous(*specs)
        t[0].copy_(source.torch.arange(32, dtype=source.torch.float32).reshape(8, 4))
        t[2].fill_(1.5)
        j = a.jax.get_simultaneous(*specs)
        for tv, jv in zip(t, j, strict=True):
            assert jv.unsafe_buffer_pointer() == tv.data_ptr()
            assert jv.shape == tuple(tv.shape)
        assert float(jnp.sum(j[0])) == float(sum(range(32)))
        assert j[2].dtype == jnp.bfloat16 and float(jnp.sum(j[2].astype(jnp.float32))) == 7.5
        (empty,) = a.jax.get_simultaneous(((0, 4), "float32"))
        assert empty.shape == (0, 4)


def test_empty_jax_views_of_a_torch_owned_buffer_keep_their_dtype() -> None:
    """Round 18c (jax.py ``_source`` #10: the empty torch tensor made without the view's
    dtype, so an empty int32 or bfloat16 view came out float32)."""
    with Arena(source=TorchOwnedHost(), framework="torch") as a:
        # One view with bytes: a request of empty views alone gets no torch-owned block.
        specs = (((4,), "float32"), ((0,), "int32"), ((2, 0), "bfloat16"), ((0, 3), "uint8"))
        views = a.jax.get_simultaneous(*specs)
        assert [(v.shape, v.dtype) for v in views] == [
            ((4,), jnp.float32),
            ((0,), jnp.int32),
            ((2, 0), jnp.bfloat16),
            ((0, 3), jnp.uint8),
        ]


def test_a_cached_jax_front_still_hands_out_new_arrays() -> None:
    with arena.Arena("cpu", framework="numpy") as a:
        front = a.front("jax", cached=True)
        (first,) = front.get_simultaneous(((8,), "float32"))
        (second,) = front.get_simultaneous(((8,), "float32"))
        assert first is not second  # a shared object could carry a stale host copy
        assert front.data_ptr(first) == front.data_ptr(second)


def _donate(view: object) -> object:
    """Call a jitted function that donates ``view`` (what the contract says not to do)."""
    double = jax.jit(lambda x: x * 2, donate_argnums=0)
    with warnings.catch_warnings():
        # A backend that cannot reuse the buffer says so and keeps it; JAX 0.10 on CPU
        # donates (deletes) it, which is what this file checks the arena survives.
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        return jax.block_until_ready(double(view))


@pytest.mark.parametrize("cached", [False, True])
def test_a_donated_view_is_rebuilt_never_handed_out_deleted(shared: Arena, cached: bool) -> None:
    front = shared.front("jax", cached=cached)
    specs = (((8,), "float32"), ((4,), "int32"))
    host, ints = shared.numpy.get_simultaneous(*specs)
    host[...] = 3.0
    ints[...] = 5
    shared.lock()  # the rebuild imports again: it allocates nothing
    x, _ = front.get_simultaneous(*specs)
    doubled = _donate(x)
    assert x.is_deleted()  # JAX 0.10 on CPU donates: the shared import is gone
    assert np.asarray(doubled).tolist() == [6.0] * 8
    for _ in range(3):
        again, again_ints = front.get_simultaneous(*specs)
        assert not again.is_deleted() and not again_ints.is_deleted()
        assert again.unsafe_buffer_pointer() == shared.numpy.data_ptr(host)
        assert float(jnp.sum(again)) == 24.0 and int(jnp.sum(again_ints)) == 20
    (explicit, _) = front.get_simultaneous(*specs)
    explicit.delete()  # an explicit delete is the same case
    (after, _) = front.get_simultaneous(*specs)
    assert float(jnp.sum(after)) == 24.0
    assert shared.stats().allocations_while_locked == 0


def test_a_donated_persistent_view_is_rebuilt(shared: Arena) -> None:
    table = shared.jax.get_persistent("table", (8,), "float32", zero_init=True)
    _donate(table)
    assert table.is_deleted()
    again = shared.jax.get_persistent("table", (8,), "float32")
    assert not again.is_deleted() and float(jnp.sum(again)) == 0.0
    assert again.unsafe_buffer_pointer() == table_pointer(shared)
    assert shared.jax.get_persistent("table", (8,), "float32") is again


def table_pointer(a: Arena) -> int:
    return a.numpy.data_ptr(a.numpy.get_persistent("table", (8,), "float32"))


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("seen_before", [False, True])
def test_a_request_under_a_trace_is_refused(shared: Arena, cached: bool, seen_before: bool) -> None:
    front = shared.front("jax", cached=cached)
    specs = (((4,), "float32"),)
    if seen_before:  # the request inside is a hit
        front.get_simultaneous(*specs)

    @jax.jit
    def reads_the_arena(x: object) -> object:
        (view,) = front.get_simultaneous(*specs)
        return view * x

    with pytest.raises(arena.TracedRequestError, match=r"outside.*pass the view in"):
        reads_the_arena(2.0)
    with pytest.raises(arena.TracedRequestError):
        jax.make_jaxpr(lambda: front.try_get_simultaneous(*specs))()
    with pytest.raises(arena.TracedRequestError):
        jax.jit(lambda: front.get_persistent("kept", (4,), "float32"))()

    # The way that works: request outside, pass the view in; later writes are seen.
    (host,) = shared.numpy.get_simultaneous(*specs)
    host[...] = 1.0
    scale = jax.jit(lambda view, x: view * x)
    (view,) = front.get_simultaneous(*specs)
    assert np.asarray(scale(view, 2.0)).tolist() == [2.0] * 4
    host[...] = 5.0
    (view,) = front.get_simultaneous(*specs)
    assert np.asarray(scale(view, 2.0)).tolist() == [10.0] * 4


def test_the_traced_request_error_is_an_arena_runtime_error() -> None:
    assert issubclass(arena.TracedRequestError, arena.ArenaError)
    assert issubclass(arena.TracedRequestError, RuntimeError)


def test_jax_zero_d_bfloat16_works_and_complex32_is_a_dtype_error() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")  # bfloat16 reaches JAX through torch's DLPack export
    with Arena("cpu", framework="jax") as a:
        (scalar,) = a.get_simultaneous(((), "bfloat16"))
        assert scalar.shape == () and str(scalar.dtype) == "bfloat16"
        with pytest.raises(arena.DTypeError, match="JAX has no complex32"):
            a.get_simultaneous(((4,), "complex32"))


def test_a_request_under_a_trace_names_the_trace(shared: Arena) -> None:
    """The refusal names the kind of trace that was running (Round 18a:
    ``_check_not_tracing`` #4 named ``NoneType``)."""
    traced = r"\((\w+Trace): jax\.jit, make_jaxpr, vmap, grad or a lax loop body\)"
    with pytest.raises(arena.TracedRequestError, match=traced) as caught:
        jax.jit(lambda: shared.jax.get_simultaneous(((4,), "float32")))()
    assert "JaxprTrace" in str(caught.value)  # DynamicJaxprTrace
    with pytest.raises(arena.TracedRequestError, match=traced) as caught:
        jax.vmap(lambda x: shared.jax.get_simultaneous(((4,), "float32")))(jnp.ones(2))
    assert "(BatchTrace: " in str(caught.value)
