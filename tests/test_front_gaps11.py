"""Gaps in the front's tests that mutation Round 11 found (mutants of ``arena/front.py``
left not sorted there), each test failing with its mutant planted."""

from __future__ import annotations

import pytest

from arena import Arena
from tests.counting import counting

F32 = "float32"


def test_a_persistent_buffer_is_laid_out_at_the_arenas_alignment() -> None:
    """A persistent buffer is sized at the arena's alignment, not the default one of 256
    bytes (Round 11: ``Front.get_persistent`` #12 left ``compute_layout`` its default;
    the store rounds a buffer up to the arena's alignment only when it is smaller)."""
    with Arena("cpu", framework="numpy", alignment=4096) as ws:
        ws.numpy.get_persistent("k", (1025,), F32)  # 4100 bytes: 8192, not 4352
        assert ws.stats().slots[0].persistent_bytes == 8192
    with Arena("cpu", framework="numpy", alignment=64) as ws:
        ws.numpy.get_persistent("k", (1,), F32)  # 4 bytes: 64, not 256
        assert ws.stats().slots[0].persistent_bytes == 64


def test_a_deleted_persistent_jax_array_is_built_again() -> None:
    """A persistent JAX array that a donation deleted is built again by the next call,
    and kept from then on (Round 11: ``Front.get_persistent`` #22 never read the kept
    view, so ``setdefault`` handed the deleted one back)."""
    pytest.importorskip("jax")
    with Arena("cpu", framework="jax") as ws:
        front = ws.front("jax")
        first = front.get_persistent("k", (4,), F32, zero_init=True)
        assert front.get_persistent("k", (4,), F32) is first
        first.delete()  # what a jitted function's donation does
        again = front.get_persistent("k", (4,), F32)
        assert again is not first
        assert not again.is_deleted()
        assert float(again.sum()) == 0.0  # the same bytes, zeroed when made
        assert front.get_persistent("k", (4,), F32) is again


@pytest.mark.parametrize("kind", ["cached", "poison"])
def test_a_numpy_front_handing_out_no_fresh_views_plans_at_the_first_sighting(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Only a NumPy front handing out fresh views (``ndarray.view``) places a structure's
    first sighting from the request and plans it at the second; a cached front (the
    prepared views themselves) and a poisoning one plan it at the first (Round 11:
    ``_numpy_fresh`` #5, ``or`` made ``and``, took every NumPy front for one handing out
    fresh views)."""
    from arena.views import builder

    made = counting(monkeypatch, builder, "make_plan")  # plans made, as one count
    specs = (((4,), F32), ((4, 4), "int32"))
    with Arena("cpu", framework="numpy", poison=kind == "poison") as ws:
        front = ws.front("numpy", cached=kind == "cached")
        ws.reserve(((1 << 16,), F32))
        views = front.get_simultaneous(*specs)
        assert [v.shape for v in views] == [(4,), (4, 4)]
        assert made == [1]
