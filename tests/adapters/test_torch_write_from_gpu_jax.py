"""``write_into`` a torch view from an array whose array interface torch refuses: a JAX
array on a GPU publishes a read-only ``__cuda_array_interface__`` and
``torch.as_tensor`` raises "the read only flag is not supported" (the first GPU run, JAX
0.11 and torch 2.11). The value is only read, so its bytes come through DLPack, or
through the host where DLPack is refused too. On the CPU the refusal is played by a
patched ``torch.as_tensor``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
torch_adapter = pytest.importorskip("arena.adapters.torch")


def _refuse_jax(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``torch.as_tensor`` refuses JAX arrays as torch refuses a GPU one; the refusals."""
    real = torch.as_tensor
    refused: list[Any] = []

    def as_tensor(value: Any, *args: Any, **kwargs: Any) -> Any:
        if type(value).__module__.startswith("jax"):
            refused.append(value)
            raise TypeError("the read only flag is not supported, should always be False")
        return real(value, *args, **kwargs)

    monkeypatch.setattr(torch, "as_tensor", as_tensor)
    return refused


def test_a_value_torch_reads_only_through_dlpack_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = _refuse_jax(monkeypatch)
    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((2, 3), torch.float32))
        value = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
        written = ws.torch.write_into(view, value)
        assert written.data_ptr() == view.data_ptr()
        assert view.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert len(refused) == 1


def test_through_dlpack_the_value_itself_is_imported_not_copied_through_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Round 18a: ``_as_tensor`` #14 (``from_dlpack(None)``: its error sent every value
    through the host copy, which still wrote the right numbers)."""
    _refuse_jax(monkeypatch)
    real = torch_adapter.from_dlpack
    imported: list[Any] = []

    def recording(value: Any) -> Any:
        imported.append(value)
        return real(value)

    def no_host_copy(value: Any) -> Any:
        raise AssertionError(f"torch.from_numpy({value!r}) where DLPack takes the value")

    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((3,), torch.float32))
        monkeypatch.setattr(torch_adapter, "from_dlpack", recording)
        monkeypatch.setattr(torch, "from_numpy", no_host_copy)
        value = jnp.asarray(np.array([1.5, 2.5, 3.5], np.float32))
        ws.torch.write_into(view, value)
        assert view.tolist() == [1.5, 2.5, 3.5]
    assert len(imported) == 1 and imported[0] is value


def test_where_dlpack_is_refused_too_the_bytes_come_through_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = _refuse_jax(monkeypatch)

    real = torch_adapter.from_dlpack  # also what builds the arena's own views

    def no_jax_dlpack(value: Any) -> Any:
        if type(value).__module__.startswith("jax"):
            raise BufferError("read-only DLPack tensors are not supported")
        return real(value)

    monkeypatch.setattr(torch_adapter, "from_dlpack", no_jax_dlpack)
    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((4,), torch.int32))
        ws.torch.write_into(view, jnp.asarray(np.array([7, 8, 9, 10], np.int32)))
        assert view.tolist() == [7, 8, 9, 10] and len(refused) == 1


def test_other_type_errors_of_as_tensor_still_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    def as_tensor(value: Any, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("can't convert np.ndarray of type numpy.object_")

    monkeypatch.setattr(torch, "as_tensor", as_tensor)
    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((2,), torch.float32))
        with pytest.raises(TypeError, match=r"numpy\.object_"):
            ws.torch.write_into(view, jnp.zeros(2, jnp.float32))


@pytest.mark.gpu
def test_a_jax_array_on_the_gpu_is_written_into_a_torch_view_on_the_gpu() -> None:
    """The case itself, where JAX computes on a GPU."""
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus or not torch.cuda.is_available():
        pytest.skip("needs JAX and torch on a CUDA device")
    with Arena("cuda:0", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((2, 3), torch.float32))
        value = jax.device_put(jnp.arange(6, dtype=jnp.float32).reshape(2, 3), gpus[0])
        written = ws.torch.write_into(view, value)
        assert written.data_ptr() == view.data_ptr()
        assert view.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
