"""Arena-level invariants under random request sequences (Hypothesis)."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from arena import Arena, ArenaLockedError
from tests.sources import RecordingSource

DTYPES = ["int8", "float16", "float32", "int64", "complex128"]
spec = st.tuples(st.lists(st.integers(0, 40), max_size=3).map(tuple), st.sampled_from(DTYPES))
request = st.lists(spec, min_size=1, max_size=5).map(tuple)
step = st.tuples(
    st.sampled_from(["get", "get", "get", "lock", "unlock"]), request, st.integers(0, 1)
)


@settings(max_examples=120, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=25), alignment=st.sampled_from([16, 64, 256]))
def test_random_sequences_keep_every_guarantee(
    steps: list[tuple[str, tuple[tuple[tuple[int, ...], str], ...], int]], alignment: int
) -> None:
    source = RecordingSource()
    a = Arena(source=source, ubatches=2, alignment=alignment, framework="numpy")
    try:
        for action, specs, ubatch in steps:
            if action == "lock":
                a.lock()
                continue
            if action == "unlock":
                a.unlock()
                continue
            with a.ubatch(ubatch):
                before = len(source.events)
                slot = a.stats().slots[ubatch]
                try:
                    views = a.get_simultaneous(*specs)
                except ArenaLockedError as error:
                    assert a.is_locked and len(source.events) == before
                    assert error.required > error.current == slot.capacity
                    assert error.required > 0  # zero-byte requests are always served
                    continue
                if a.is_locked:
                    assert len(source.events) == before  # nothing allocated while locked
                capacity = a.stats().slots[ubatch].capacity
                pointers = [a.numpy.data_ptr(v) for v in views]
                base = min(pointers)
                spans = sorted(
                    (p - base, p - base + v.nbytes) for p, v in zip(pointers, views, strict=True)
                )
                for (_, end), (next_start, _) in itertools.pairwise(spans):
                    assert end <= next_start  # no two views of one request overlap
                assert spans[-1][1] <= capacity  # all inside the slot buffer
                assert all((p - base) % alignment == 0 for p in pointers)
                for view, (shape, dtype) in zip(views, specs, strict=True):
                    assert view.shape == shape and view.dtype == np.dtype(dtype)
                    view[...] = 1  # writable, exactly its own bytes
        a.lock()
        sizes = [s.capacity for s in a.stats().slots]
        assert sizes[0] == sizes[1]  # lock left no micro-batch unsized
    finally:
        a.close()
    assert source.live == {}
