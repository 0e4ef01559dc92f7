"""Planted bugs the suite let through in arena.base (branch plant36): each test names the
bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

from arena import Arena, compute_layout
from arena.base.layout import clear_layout_memo


class LyingName(str):
    """Names float64 but equals and hashes like "float32"."""

    def __eq__(self, other: object) -> bool:
        return other == "float32"

    def __hash__(self) -> int:
        return hash("float32")


def test_a_memoised_layout_is_never_the_answer_for_a_str_subclass_dtype_name() -> None:
    # Plant L2: compute_layout's memo hit checked only that shapes are exact tuples, not
    # that dtype names are plain strs: a str subclass that equals "float32" but names
    # float64 got the memoised float32 layout (views of the wrong dtype and size).
    clear_layout_memo()
    plain = compute_layout((((100,), "float32"),), 16)
    assert compute_layout((((100,), "float32"),), 16) is plain  # memoised
    odd = compute_layout((((100,), LyingName("float64")),), 16)
    assert odd.views[0].dtype.name == "float64"
    assert odd.views[0].nbytes == 800
    assert odd.total == 800


def test_a_plain_request_after_growth_never_poisons_a_live_scope_view() -> None:
    # Plant P4: poison_outgrown poisoned the buffers a growth replaced from byte 0, not
    # from the slot's top: a scope's view, still live and in the replaced buffer, read NaN
    # after a plain request inside the scope grew the slot and a next one ran.
    with Arena("cpu", framework="numpy", poison=True) as ws, ws.scope() as s:
        (kept,) = s.get_simultaneous(((16,), "float32"))
        kept[...] = 1.0
        ws.get_simultaneous(((4096,), "float32"))  # above the scope: the slot grows
        ws.get_simultaneous(((16,), "float32"))
        assert (kept == 1.0).all()
