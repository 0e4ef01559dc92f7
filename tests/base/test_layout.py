from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from arena import ConfigError, SpecError, compute_layout
from arena.base.dtypes import KNOWN_DTYPES
from arena.base.layout import clear_layout_memo, round_up

DTYPES = sorted(KNOWN_DTYPES)
shapes = st.lists(st.integers(0, 64), min_size=0, max_size=4).map(tuple)
specs_strategy = st.lists(st.tuples(shapes, st.sampled_from(DTYPES)), min_size=1, max_size=8)
alignments = st.sampled_from([16, 32, 64, 128, 256, 512, 4096])


def test_offsets_are_running_sums_of_rounded_sizes() -> None:
    layout = compute_layout((((10,), "float32"), ((3, 3), "float16"), ((1,), "int8")), 256)
    assert [v.offset for v in layout.views] == [0, 256, 512]
    assert [v.nbytes for v in layout.views] == [40, 18, 1]
    assert layout.total == 768


def test_reference_example_matches_vllm_arithmetic() -> None:
    # vLLM: actual = prod(shape) * itemsize, aligned = round_up(actual, 256), offsets = cumsum
    specs = (((1000, 7), "bfloat16"), ((33,), "float32"), ((0, 5), "int64"), ((300,), "uint8"))
    actual = [14000, 132, 0, 300]
    aligned = [round_up(a, 256) for a in actual]
    offsets = [sum(aligned[:i]) for i in range(len(aligned))]
    layout = compute_layout(specs)
    assert [v.nbytes for v in layout.views] == actual
    assert [v.offset for v in layout.views] == offsets
    assert layout.total == sum(aligned)


def test_layout_is_memoised_per_signature() -> None:
    specs = (((7, 9), "float32"), ((2,), "int64"))
    assert compute_layout(specs, 256) is compute_layout(specs, 256)
    assert compute_layout(specs, 256) is not compute_layout(specs, 512)


@pytest.mark.parametrize("bad", [(1.0,), (True,), (2.0, 3)])
def test_a_memoised_layout_is_not_served_for_float_or_bool_dims(bad: tuple[object, ...]) -> None:
    good = tuple(int(d) for d in bad)
    compute_layout(((good, "float32"),))
    with pytest.raises(SpecError):
        compute_layout(((bad, "float32"),))


def test_numpy_integer_dims_are_accepted() -> None:
    np = pytest.importorskip("numpy")
    layout = compute_layout((((np.int64(4), np.int32(2)), "float32"),))
    assert layout.views[0].shape == (4, 2)
    assert all(type(d) is int for d in layout.views[0].shape)


def test_strides_are_c_contiguous_in_elements() -> None:
    view = compute_layout((((2, 3, 4), "float32"),)).views[0]
    assert view.strides == (12, 4, 1)
    assert view.byte_strides == (48, 16, 4)


@settings(max_examples=300, deadline=None)
@given(specs=specs_strategy, alignment=alignments)
def test_layout_invariants(specs: list[tuple[tuple[int, ...], str]], alignment: int) -> None:
    layout = compute_layout(tuple(specs), alignment)
    previous_end = 0
    for (shape, dtype), view in zip(specs, layout.views, strict=True):
        count = 1
        for dim in shape:
            count *= dim
        # each view covers exactly its own bytes
        assert view.nbytes == count * KNOWN_DTYPES[dtype]
        assert view.shape == shape
        # aligned, in order, no overlap, in bounds
        assert view.offset % alignment == 0
        assert view.offset >= previous_end
        assert view.offset + view.nbytes <= layout.total
        previous_end = view.offset + view.nbytes
    assert layout.total % alignment == 0
    assert layout.total == sum(round_up(v.nbytes, alignment) for v in layout.views)


def test_numpy_bools_are_named_as_bools() -> None:
    np = pytest.importorskip("numpy")
    for flag in (np.True_, np.bool_(False)):
        with pytest.raises(SpecError, match=r"^spec #0: dimension 1 is a bool \("):
            compute_layout((((4, flag), "float32"),))


def test_messages_name_the_spec_the_dimension_and_the_fix() -> None:
    np = pytest.importorskip("numpy")
    cases = [
        ((((2.5,), "float32"),), "spec #0: dimension 0 must be an int, got float 2.5"),
        ((((2.0,), "float32"),), "spec #0: dimension 0 must be an int, got float 2.0; use 2"),
        (
            (((4,), "int8"), ("ab", "float32")),
            "spec #1: shape must be a tuple or list of ints, got str 'ab'; pass a tuple such "
            "as (4, 128)",
        ),
        (
            (((4,), "int8"), (4, "float32")),
            "spec #1: shape must be a tuple or list of ints, got int 4; pass (4,)",
        ),
        (
            ((4, 8), "float32"),  # torch.empty's spelling: the shape and the dtype apart
            "spec #0 is (4, 8), a shape without its dtype: each argument is one view's "
            "(shape, dtype) pair, as in get_simultaneous(((4, 8), 'float32'))",
        ),
        (
            (((4,), "int8"), ((2**62, 3), "float32")),
            "spec #1: shape (4611686018427387904, 3) of float32 spans 55340232221128654848 "
            "bytes of strides, more than the 9223372036854775807 a framework can index (even "
            "with a zero dimension); the shape probably overflowed upstream",
        ),
        (
            (((np.int64(2**63 - 1),), "uint8"),),
            "spec #0 brings the layout to 9223372036854775808 bytes, more than the "
            "9223372036854775807 a buffer can address; split the request or shrink the shapes",
        ),
    ]
    for specs, message in cases:
        with pytest.raises(SpecError) as info:
            compute_layout(specs)
        assert str(info.value) == message
    with pytest.raises(SpecError) as not_a_sequence:
        compute_layout({((4,), "float32")})  # type: ignore[arg-type]
    assert str(not_a_sequence.value) == (
        "specs must be a sequence of (shape, dtype) tuples, got set"
    )


def test_edge_dimensions_are_accepted_by_value() -> None:
    np = pytest.importorskip("numpy")
    assert compute_layout((((np.int64(0), 3), "float32"),)).views[0].shape == (0, 3)
    assert compute_layout((((0, 2**62), "uint8"),)).total == 0  # 2**62 of extent: indexable
    assert compute_layout((((2**63 - 1, 0), "uint8"),)).total == 0  # exactly the limit


def test_alignments_up_to_a_gibibyte_are_accepted_and_the_suggestion_is_the_next_power() -> None:
    assert compute_layout((((1,), "int8"),), 2**30).total == 2**30
    assert compute_layout((((1,), "int8"),), 64).alignment == 64
    with pytest.raises(ConfigError) as too_large:
        compute_layout((((1,), "int8"),), 2**31)
    assert str(too_large.value) == (
        "alignment must be at most 1073741824 (1 GiB), got 2147483648; offsets are rounded "
        "up to it, so use e.g. alignment=256 or 4096"
    )
    for alignment, suggestion in [(127, 128), (129, 256), (100, 128), (8, 16), (0, 16)]:
        with pytest.raises(ConfigError, match=rf"use alignment={suggestion}$"):
            compute_layout((((1,), "int8"),), alignment)


def test_the_layout_memo_is_bounded_and_drops_its_oldest_quarter() -> None:
    from arena.base import layout as module

    clear_layout_memo()
    limit = module._MEMO_LIMIT
    first = compute_layout((((1,), "int8"),))
    kept = [compute_layout((((n,), "int8"),)) for n in range(2, limit + 1)]
    assert len(module._MEMO) == limit
    assert compute_layout((((1,), "int8"),)) is first  # full, not over: nothing dropped
    newest = compute_layout((((limit + 1,), "int8"),))  # one more: the oldest quarter goes
    assert len(module._MEMO) == limit - limit // 4 + 1
    assert compute_layout((((limit + 1,), "int8"),)) is newest
    assert compute_layout((((limit,), "int8"),)) is kept[-1]
    assert compute_layout((((1,), "int8"),)) is not first
    clear_layout_memo()


@pytest.mark.parametrize("held_at", [0, 1])
def test_two_threads_sweeping_the_memo_at_once_drop_one_quarter_and_raise_nothing(
    held_at: int,
) -> None:
    """Thread A is held in its sweep (after its check that the memo is full, held_at 0, or
    after it listed the keys to drop, held_at 1) while thread B sweeps and inserts; then A
    goes on. One sweep's worth goes, no more, and neither thread raises (KeyError: a key A
    listed is gone): the check, the sweep and the insert are one step under the memo's
    lock."""
    import inspect
    import sys
    import threading

    from arena.base import layout as module

    clear_layout_memo()
    limit = module._MEMO_LIMIT
    for n in range(1, limit + 1):
        compute_layout((((n,), "int8"),))
    assert len(module._MEMO) == limit
    lines, first = inspect.getsourcelines(module._compute_and_memoise)
    sweep = first + held_at + next(i for i, text in enumerate(lines) if "for old in" in text)
    at_sweep, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def gate(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is module._compute_and_memoise.__code__:
            if event == "line" and frame.f_lineno == sweep and not at_sweep.is_set():
                at_sweep.set()
                assert go.wait(10)
            return gate
        return None

    def first_thread() -> None:
        sys.settrace(gate)
        try:
            compute_layout((((limit + 1,), "int8"),))
        except BaseException as exc:
            errors.append(exc)
        finally:
            sys.settrace(None)

    def second_thread() -> None:
        try:
            compute_layout((((limit + 2,), "int8"),))
        except BaseException as exc:
            errors.append(exc)

    a = threading.Thread(target=first_thread)
    a.start()
    assert at_sweep.wait(10)
    b = threading.Thread(target=second_thread)
    b.start()
    b.join(0.5)  # old code: B sweeps now; with the lock B waits for A
    go.set()
    a.join(10)
    b.join(10)
    try:
        assert not errors
        assert len(module._MEMO) == limit - limit // 4 + 2
    finally:
        clear_layout_memo()


def test_the_spec_by_spec_path_lays_out_dims_of_zero_and_one_as_the_straight_path() -> None:
    # Round 10 of the mutation tests: layout.py _c_strides #12 (`max(dim, 2)`). NumPy
    # ints as dimensions take the spec-by-spec path (_validated), plain ints the straight
    # one; both give C-contiguous strides, a zero or one dimension counting as 1 (a stride
    # of 8 elements, not 4, above a dimension of one was the mutant's).
    plain = (((3, 1, 4), "float32"), ((2, 0, 5), "float32"), ((1, 1), "int8"))
    numpy_ints = tuple((tuple(np.int64(d) for d in shape), dt) for shape, dt in plain)
    straight = compute_layout(plain, 256)
    by_spec = compute_layout(numpy_ints, 256)
    assert [v.strides for v in straight.views] == [(4, 4, 1), (5, 5, 1), (1, 1)]
    assert by_spec == straight
