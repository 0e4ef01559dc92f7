"""What Round 14f of the mutation tests found the suite let through in ``arena/base/layout.py``
(issue 26 item 12); each test names the mutants it kills (mutmut's numbers on ``335b43c``)."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from arena import SpecError, compute_layout
from arena.base import layout as layout_module
from arena.base.layout import clear_layout_memo


def test_a_plain_first_request_takes_the_straight_path() -> None:
    # _compute_and_memoise #13 (exact_dims(None)), #28 (zip(None, ...)), #38
    # (reversed(None)), #77 (Layout without its views), #79 (Layout without its
    # alignment): each makes the straight path raise, and its `except` hands the request
    # to the spec-by-spec path, which lays it out the same. The straight path is the one
    # a plain request must take (its docstring: a first request calls nothing of this
    # module's after resolving its dtypes), so the spec-by-spec path must not run.
    taken: list[Any] = []
    original = layout_module._validated

    def recording(specs: Any, alignment: int) -> Any:
        taken.append(specs)
        return original(specs, alignment)

    specs = (((3, 0, 5), "float32"), ((7,), "int8"), ((), "float64"))
    clear_layout_memo()
    layout_module._validated = recording
    try:
        layout = compute_layout(specs, 64)
    finally:
        layout_module._validated = original
        clear_layout_memo()
    assert taken == []
    assert [v.offset for v in layout.views] == [0, 0, 64]
    assert [v.strides for v in layout.views] == [(5, 5, 1), (1,), ()]
    assert (layout.total, layout.alignment) == (128, 64)


def test_a_spec_of_two_items_that_is_no_tuple_or_list_is_refused() -> None:
    # _compute_and_memoise #4 (`spec.__class__ not in _SEQUENCES and len(spec) != 2`): a
    # deque of a shape and a dtype passed the straight path's check and was laid out;
    # the spec-by-spec path refuses every spec that is not a tuple or list.
    clear_layout_memo()
    with pytest.raises(SpecError, match=r"spec #0 must be a \(shape, dtype\) tuple"):
        compute_layout([deque([(4,), "float32"])])
    with pytest.raises(SpecError, match=r"spec #1 must be a \(shape, dtype\) tuple"):
        compute_layout([((2,), "int8"), deque([(4,), "float32"])])


def test_a_whole_float_dimension_of_zero_is_told_to_use_zero() -> None:
    # check_dim #44 (`0 < int(dim)`): a dimension of 0.0 lost the "; use 0" the other
    # whole floats get.
    with pytest.raises(SpecError, match=r"dimension 1 must be an int, got float 0\.0; use 0$"):
        compute_layout([((4, 0.0), "float32")])
    with pytest.raises(SpecError, match=r"dimension 0 must be an int, got float -0\.0; use 0$"):
        compute_layout([((-0.0,), "float32")])


class _ClaimsItsFirstSpec(tuple):  # type: ignore[type-arg]
    """Specs that say they equal (and hash like) their first spec alone."""

    def __eq__(self, other: object) -> bool:
        return tuple(self[:1]) == other or tuple(self) == other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(tuple(self[:1]))


def test_a_memo_hit_never_serves_a_layout_of_another_number_of_views() -> None:
    # compute_layout #9 (`zip(specs, kinds, strict=None)`): specs that found a memoised
    # layout of fewer views by a lying equality got that layout, one view short, where
    # the zip's strict check refuses them.
    clear_layout_memo()
    try:
        compute_layout((((4,), "float32"),))
        liar = _ClaimsItsFirstSpec((((4,), "float32"), ((8,), "float32")))
        try:
            layout = compute_layout(liar)
        except ValueError:  # zip(strict=True): the hit's specs and kinds differ in length
            return
        assert len(layout.views) == len(liar)
    finally:
        clear_layout_memo()
