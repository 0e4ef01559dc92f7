"""Per-structure plans agree with compute_layout byte for byte, refuse what the general
path refuses, and bounded caches keep a working set."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena import Arena, SpecError, compute_layout
from arena.views import builder, plan
from arena.views.prepared import Prepared, remember
from tests.sources import RecordingSource

DTYPES = ["float32", "float16", "int8", "int64", "bfloat16", "uint16"]
shapes = st.lists(st.integers(0, 40), min_size=0, max_size=3).map(tuple)
requests = st.lists(st.tuples(shapes, st.sampled_from(DTYPES)), min_size=1, max_size=5)


def _address(front: Any, view: Any) -> int:
    return int(front.data_ptr(view))


def _check(front: Any, base: int, specs: tuple[Any, ...], alignment: int) -> None:
    views = front.get_simultaneous(*specs)
    layout = compute_layout(specs, alignment)
    for view, expected in zip(views, layout.views, strict=True):
        assert tuple(view.shape) == expected.shape
        if expected.nbytes:
            assert _address(front, view) - base == expected.offset
        strides = view.strides if front.framework == "numpy" else view.stride()
        if front.framework == "numpy":
            assert tuple(strides) == expected.byte_strides
        else:
            assert tuple(strides) == expected.strides


@pytest.mark.parametrize("tier", ["closure", "generated"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@settings(max_examples=80, deadline=None)
@given(first=requests, sizes=st.lists(shapes, min_size=1, max_size=5))
def test_plans_place_views_exactly_as_compute_layout(
    framework: str,
    tier: str,
    first: list[tuple[tuple[int, ...], str]],
    sizes: list[tuple[int, ...]],
) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    if tier == "generated":  # every plan generates its code at its first build
        plan.GENERATE_AFTER, saved = 1, plan.GENERATE_AFTER
        try:
            _place(framework, first, sizes)
        finally:
            plan.GENERATE_AFTER = saved
    else:
        _place(framework, first, sizes)


def _place(
    framework: str, first: list[tuple[tuple[int, ...], str]], sizes: list[tuple[int, ...]]
) -> None:
    alignment = 64
    with Arena("cpu", framework="numpy", alignment=alignment) as a:
        front = a.front(framework)
        a.reserve_bytes(4 << 20)  # larger than any drawn request: the buffer never moves
        (probe,) = front.get_simultaneous(((1,), "uint8"))
        base = _address(front, probe)
        specs = tuple((shape, dtype) for shape, dtype in first)
        _check(front, base, specs, alignment)  # the general path, then the plan
        # the same structure with other sizes: served by the plan
        for index in range(len(specs)):
            shape = sizes[index % len(sizes)][: len(specs[index][0])]
            shape = (*shape, *(1,) * (len(specs[index][0]) - len(shape)))
            specs = (*specs[:index], (shape, specs[index][1]), *specs[index + 1 :])
            _check(front, base, specs, alignment)


def test_plan_refuses_what_the_general_path_refuses() -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((4, 4), "float32"))  # the plan for one 2-D float32 view exists
        for bad, pattern in [
            (((2.0, 4), "float32"), "use 2"),
            (((True, 4), "float32"), "bool"),
            (((-1, 4), "float32"), "negative"),
            ((np.array([2, 4]), "float32"), "shape must be"),
            (("ab", "float32"), "shape must be"),
            (({2: 0, 3: 0}, "float32"), "shape must be"),
            (((2, 4), "float32", 0), r"\(shape, dtype\) tuple"),
        ]:
            with pytest.raises(SpecError, match=pattern):
                a.get_simultaneous(bad)


def test_list_specs_and_list_shapes_are_served_like_tuples() -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((4, 4), "float32"))
        for spec in ([(2, 4), "float32"], ([2, 4], "float32"), [[2, 4], "float32"]):
            (view,) = a.get_simultaneous(spec)
            assert view.shape == (2, 4)


def test_a_planned_request_larger_than_the_buffer_grows_through_the_general_path() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((16, 4), "float32"))
        (big,) = a.get_simultaneous(((4096, 4), "float32"))  # same structure, too big
        assert big.shape == (4096, 4) and big.base.nbytes >= big.nbytes
        assert source.allocations() == [256, 65536]
        a.lock()
        assert a.try_get_simultaneous(((8192, 4), "float32")) is None


def test_planned_views_are_new_objects_and_cached_fronts_reuse_them() -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((3, 4), "float32"))
        (x,) = a.get_simultaneous(((5, 4), "float32"))
        (y,) = a.get_simultaneous(((5, 4), "float32"))
        assert x is not y and x.__array_interface__["data"] == y.__array_interface__["data"]
        cached = a.front("numpy", cached=True)
        (p,) = cached.get_simultaneous(((7, 4), "float32"))
        (q,) = cached.get_simultaneous(((7, 4), "float32"))
        assert p is q


def test_a_layout_is_remembered_from_its_second_sighting() -> None:
    with Arena("cpu", framework="numpy", max_cached_layouts=4096) as a:
        a.reserve(((3000, 8), "float32"), ((3000,), "int32"))  # presized: no growth
        for n in range(1, 3001):
            a.get_simultaneous(((n, 8), "float32"), ((n,), "int32"))
        assert a.stats().cached_layouts <= 2  # seen once: handed out as built
        for n in range(1, 3001):
            a.get_simultaneous(((n, 8), "float32"), ((n,), "int32"))
        stats = a.stats()
        assert stats.cached_layouts == 3000  # every layout kept: nothing cleared wholesale
        assert stats.cached_views == 6000


def test_the_cache_sweeps_in_part_and_spares_what_was_used() -> None:
    cache: dict[Any, Prepared] = {}
    for key in range(64):
        entry = Prepared(0, [])
        entry.used = key < 8  # keys 0..7 were used
        remember(cache, key, entry, 64)
    remember(cache, "new", Prepared(0, []), 64)
    assert len(cache) <= 64 and "new" in cache
    assert all(key in cache for key in range(8))  # used: a second chance
    assert sum(1 for key in range(8, 64) if key in cache) >= 48  # only a part was swept


class LyingDimension:
    """Equal to 4 and hashing like 4, but indexing as 1000."""

    def __eq__(self, other: object) -> bool:
        return other == 4

    def __hash__(self) -> int:
        return hash(4)

    def __index__(self) -> int:
        return 1000


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("planned", [False, True], ids=["no-plan", "plan"])
def test_a_dimension_that_lies_about_its_value_never_aliases_a_plain_one(
    cached: bool, planned: bool, hit_path: str
) -> None:
    with Arena("cpu", framework="numpy", cached_views=cached) as a:
        if planned:  # the structure has a plan and a remembered entry already
            a.get_simultaneous(((8,), "float32"))
            a.get_simultaneous(((8,), "float32"))
        (odd,) = a.get_simultaneous(((LyingDimension(),), "float32"))
        assert odd.shape == (1000,)
        for _ in range(3):  # first sighting, second sighting, remembered
            (plain,) = a.get_simultaneous(((4,), "float32"))
            assert plain.shape == (4,)
        (odd,) = a.get_simultaneous(((LyingDimension(),), "float32"))
        assert odd.shape == (1000,)


def _no_general_path(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the general path ran: no plan served this request")


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_known_structure_with_new_sizes_is_served_by_its_plan(
    framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        a.reserve_bytes(1 << 20)
        front.get_simultaneous(((3, 4), "float32"), ((5,), "int32"))  # the general path
        monkeypatch.setattr(builder, "compute_layout", _no_general_path)
        for n in range(1, 3 * plan.GENERATE_AFTER):  # the closure, then generated code
            x, y = front.get_simultaneous(((n, 4), "float32"), ((n + 1,), "int32"))
            assert tuple(x.shape) == (n, 4) and tuple(y.shape) == (n + 1,)
            assert front.data_ptr(y) - front.data_ptr(x) == -(-n * 16 // 256) * 256
        (only,) = front._builder._plans.values()
        assert only is not None and only.source.startswith("def build(")


def test_a_new_structure_generates_no_code_and_a_large_one_never_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[str] = []
    real = plan.generated
    monkeypatch.setattr(plan, "generated", lambda code, *a: (compiled.append(code), real(code, *a)))
    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 22)
        a.get_simultaneous(((1,), "uint8"))
        a.get_simultaneous(((2, 3), "float32"), ((4,), "int8"))  # first sight: a closure
        a.get_simultaneous(((2, 3), "float32"), ((4,), "int8"))
        assert compiled == []
        wide = [((n, 2), "float32") for n in range(1, plan.MAX_GENERATED_VIEWS + 2)]
        for n in range(2 * plan.GENERATE_AFTER):
            a.get_simultaneous(*wide[:-1], ((n + 1, 2), "float32"))
        assert compiled == []  # 17 views: a closure for good
        for n in range(plan.GENERATE_AFTER):
            a.get_simultaneous(((n + 2, 3), "float32"), ((4,), "int8"))
        assert len(compiled) == 1 and compiled[0].startswith("def build(")


class BrokenAdapterView(Exception):
    pass


def test_an_error_inside_a_plan_raises_instead_of_falling_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena.adapters.numpy import NumpyAdapter

    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 16)
        a.get_simultaneous(((4,), "float32"))

        def broken(*args: Any) -> Any:
            raise TypeError("a bug in a view builder")

        monkeypatch.setattr(NumpyAdapter, "plan_view", staticmethod(broken))
        a.numpy._builder._plans.clear()
        a.numpy._builder._last_plan = None
        with pytest.raises(TypeError, match="a bug in a view builder"):
            a.get_simultaneous(((5,), "float32"))


def test_generated_code_shows_its_source_in_tracebacks() -> None:
    import linecache
    import traceback

    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 16)
        a.get_simultaneous(((4,), "float32"))
        a.get_simultaneous(((5,), "float32"))
        (built,) = a.numpy._builder._plans.values()
        assert built is not None
        built.generate()
        filename = built.build.__code__.co_filename
        assert filename.startswith("<arena plan numpy 1 views ")
        assert linecache.getline(filename, 1).startswith("def build(specs, capacity, sources)")
        with pytest.raises(ValueError) as caught:  # no source: fails inside the code
            built.build((((4,), "float32"),), 1 << 16, ())
        text = "".join(traceback.format_exception(caught.value))
        assert filename in text and "(src0,) = sources" in text


class LyingShape(tuple):  # type: ignore[type-arg]
    """Equal to (4,) and hashing like it, but iterating as (1000,)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter((1000,))

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return (1000,)[index]


class LyingName(str):
    """Names float64 but equals and hashes like "float32"."""

    def __eq__(self, other: object) -> bool:
        return other == "float32"

    def __hash__(self) -> int:
        return hash("float32")


def test_a_shape_or_dtype_name_that_lies_never_aliases_a_plain_request(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        for _ in range(3):
            (odd,) = a.get_simultaneous((LyingShape((4,)), "float32"))
            assert odd.shape == (1000,)
        for _ in range(3):
            (plain,) = a.get_simultaneous(((4,), "float32"))
            assert plain.shape == (4,)
        for _ in range(3):
            (odd,) = a.get_simultaneous(((4,), LyingName("float64")))
            assert odd.dtype == np.float64
        for _ in range(3):
            (plain,) = a.get_simultaneous(((4,), "float32"))
            assert plain.dtype == np.float32
