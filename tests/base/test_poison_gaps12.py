"""Gaps in the tests of poisoning and dtype resolution (``arena/base/poison.py``,
``arena/base/dtypes.py``), found by Round 12a of mutation testing (``scripts/mutation
parts``, docs/testing.md): each test names the mutants it kills."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.base.dtypes import resolve_dtype
from arena.base.poison import NAN_BYTE, poison_bytes, poison_stale_bytes
from arena.errors import DTypeError

MB = 1 << 20
#: An int32 of the pattern byte 0xA5 repeated.
PATTERN_INT32 = -1515870811


def test_a_scopes_request_is_filled_with_the_sentinel_at_every_entry() -> None:
    """``poisoned`` #3 (the fill skipped where the view maker returned views): a plain
    request's stale bytes are poisoned by the front, a scope's views only by this fill."""
    a = Arena("cpu", framework="numpy", poison=True)
    (x,) = a.get_simultaneous(((16,), "int32"))
    x[:] = 7
    for _ in range(3):
        with a.scope() as scope:
            (y,) = scope.get_simultaneous(((16,), "int32"))
            assert (y == PATTERN_INT32).all()
            y[:] = 5
    a.close()


def test_an_outer_scopes_view_in_a_block_an_inner_scope_outgrew_is_poisoned_at_exit() -> None:
    """``poison_slot_bytes`` #14, #15 (the outgrown blocks let go while a scope is still
    open: the outer scope's view, in the block the inner scope's growth replaced, kept
    its bytes after the outer exit)."""
    a = Arena("cpu", framework="numpy", poison=True)
    with a.scope() as outer:
        (kept,) = outer.get_simultaneous(((16,), "float32"))
        kept[:] = 1
        with a.scope() as inner:
            (big,) = inner.get_simultaneous(((MB,), "float32"))  # the slot grows
            big[:] = 2
        assert (kept == 1).all()  # still live: the outer scope is open
    assert np.isnan(kept).all()
    a.close()


def _torch_buffer(capacity: int, poisoned_end: int = 0) -> Any:
    """A slot buffer whose block is a torch tensor, as a torch-only CUDA arena's are
    (``source='torch'``): here a host tensor, which has ``fill_`` and no ``fill``."""
    torch = pytest.importorskip("torch")
    owner = torch.zeros(capacity, dtype=torch.uint8)
    allocation = SimpleNamespace(owner=owner, ptr=owner.data_ptr())
    return SimpleNamespace(allocation=allocation, capacity=capacity, poisoned_end=poisoned_end)


def test_bytes_of_a_torch_block_are_poisoned_with_fill_() -> None:
    """``poison_bytes`` #11 (a torch block taken for a NumPy one: nothing written)."""
    buffer = _torch_buffer(64)
    poison_bytes(buffer, 8, 40)
    owner = buffer.allocation.owner
    assert owner[8:40].eq(NAN_BYTE).all() and owner[:8].eq(0).all() and owner[40:].eq(0).all()


def test_stale_bytes_of_a_torch_block_are_poisoned_with_fill_() -> None:
    """``poison_stale_bytes`` #26 (the same, for the previous request's bytes)."""
    buffer = _torch_buffer(64, poisoned_end=48)
    owner = buffer.allocation.owner
    filled: list[Any] = []
    adapter = SimpleNamespace(data_ptr=lambda view: view.data_ptr(), fill=filled.extend)
    view = owner[16:24]
    poison_stale_bytes(buffer, adapter, [view], start=8)
    assert owner[8:48].eq(NAN_BYTE).all() and owner[:8].eq(0).all() and owner[48:].eq(0).all()
    assert filled == [view] and buffer.poisoned_end == 24


@pytest.mark.parametrize(("text", "width"), [("float", "'float32'"), ("int", "'int32'")])
def test_an_ambiguous_dtype_string_is_named_in_its_error(text: str, width: str) -> None:
    """``_from_string`` #5 (the string left out: ``dtype  is ambiguous``)."""
    with pytest.raises(DTypeError) as caught:
        resolve_dtype(text)
    assert str(caught.value).startswith(f"dtype {text!r} is ambiguous (")
    assert f"e.g. {width} or" in str(caught.value)
