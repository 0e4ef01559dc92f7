from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from arena import SpecError, compute_layout
from arena.views.dtypes import KNOWN_DTYPES
from arena.views.layout import round_up

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
