"""A request served from what a front remembers (the exact request seen before, or the
plan of its structure) is held to every check the general path makes: exact-int
dimensions, no negative or overflowing dimensions, a sibling's pending growth, the lock,
the capacity, a closed arena, a capture in progress, and the bookkeeping (calls, call
sites). Each check is made with the very request a front already serves, on the default
and the cached front, with and without debug mode, for ``get_simultaneous`` and
``try_get_simultaneous``."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaClosedError, ArenaLockedError, SpecError
from tests.gates import Probe
from tests.sources import RecordingSource

F32 = "float32"
KINDS = ["default", "cached", "debug", "debug-cached"]
CALLS = ["get", "try_get"]


class LyingDimension:
    """Equal to 4 and hashing like 4, but indexing as 1000."""

    def __eq__(self, other: object) -> bool:
        return other == 4

    def __hash__(self) -> int:
        return hash(4)

    def __index__(self) -> int:
        return 1000


def _framework(name: str) -> str:
    if name == "torch":
        pytest.importorskip("torch")
    return name


def _arena(kind: str, **options: Any) -> Arena:
    return Arena("cpu", framework="numpy", debug=kind.startswith("debug"), **options)


def _front(a: Arena, framework: str, kind: str) -> Any:
    return a.front(framework, cached=kind.endswith("cached"))


def _request(front: Any, call: str, *specs: Any) -> Any:
    if call == "get":
        return front.get_simultaneous(*specs)
    return front.try_get_simultaneous(*specs)


def _warm_exact(front: Any, specs: tuple[Any, ...]) -> None:
    """Make ``specs`` a remembered request of ``front``: served by the hit path next."""
    for _ in range(3):  # first and second sightings: remembered whichever path built it
        front.get_simultaneous(*specs)
    assert front.arena.stats().cached_layouts >= 1


#: (what is warmed, the request that equals it, what the general path says of it)
EXACT_CASES: list[tuple[str, Any, Any, Any]] = [
    ("float", ((4, 4), F32), ((4.0, 4), F32), "use 4"),
    ("bool", ((1, 4), F32), ((True, 4), F32), "bool"),
    ("numpy bool", ((1, 4), F32), ((np.True_, 4), F32), "bool"),
    ("numpy float", ((4, 4), F32), ((np.float64(4.0), 4), F32), "float64"),
    ("fraction", ((4, 4), F32), ((Fraction(4), 4), F32), "Fraction"),
    ("lying", ((4,), F32), ((LyingDimension(),), F32), (1000,)),
    ("numpy int", ((4, 4), F32), ((np.int64(4), 4), F32), (4, 4)),
]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("case", "warm", "asked", "expected"), EXACT_CASES, ids=[c[0] for c in EXACT_CASES]
)
def test_a_remembered_request_checks_its_dimensions_like_the_general_path(
    *, framework: str, kind: str, call: str, case: str, warm: Any, asked: Any, expected: Any
) -> None:
    with _arena(kind) as a:
        front = _front(a, _framework(framework), kind)
        _warm_exact(front, (warm,))
        assert asked == warm  # the lookup of the exact request finds the warmed entry
        if isinstance(expected, str):
            with pytest.raises(SpecError, match=expected):
                _request(front, call, asked)
        else:
            (view,) = _request(front, call, asked)
            assert tuple(view.shape) == expected
        (again,) = _request(front, call, warm)  # the entry itself is still served
        assert tuple(again.shape) == tuple(warm[0])


#: (the request whose structure (one 2-D float32 view) has a plan, the general path's word)
PLAN_CASES: list[tuple[str, Any, Any]] = [
    ("float", ((5.0, 4), F32), "use 5"),
    ("bool", ((True, 4), F32), "bool"),
    ("negative", ((-5, 4), F32), "negative"),
    ("zero with a huge other dimension", ((0, 2**62), F32), "spans"),
    ("fraction", ((Fraction(5), 4), F32), "Fraction"),
    ("numpy int", ((np.int64(5), 4), F32), (5, 4)),
]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(("case", "asked", "expected"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_a_planned_request_checks_its_dimensions_like_the_general_path(
    *, framework: str, kind: str, call: str, case: str, asked: Any, expected: Any
) -> None:
    with _arena(kind) as a:
        front = _front(a, _framework(framework), kind)
        a.reserve_bytes(1 << 16)  # every valid request here fits: the plan would serve it
        for _ in range(2):
            front.get_simultaneous(((3, 4), F32))  # the structure's plan exists
        if isinstance(expected, str):
            with pytest.raises(SpecError, match=expected):
                _request(front, call, asked)
        else:
            (view,) = _request(front, call, asked)
            assert tuple(view.shape) == expected


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("how", ["exact", "plan"])
def test_a_sibling_grows_at_its_next_call_even_when_that_call_is_remembered(
    framework: str, kind: str, call: str, how: str
) -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy", debug=kind.startswith("debug")) as a:
        front = _front(a, _framework(framework), kind)
        with a.ubatch(1):
            _warm_exact(front, (((8,), F32),))  # (8,) is remembered on ubatch 1
        front.get_simultaneous(((100_000,), F32))  # ubatch 0 grows: ubatch 1 is due to
        assert a.stats().slots[1].capacity == 256
        with a.ubatch(1):
            # the same request (a hit), or a new size of its structure that fits (a plan)
            views = _request(front, call, (((8,) if how == "exact" else (16,)), F32))
        assert views is not None
        slots = a.stats().slots
        assert slots[1].capacity == slots[0].capacity == 400_128


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("how", ["exact", "plan"])
def test_a_remembered_or_planned_request_on_a_closed_arena_is_refused(
    framework: str, kind: str, how: str
) -> None:
    a = _arena(kind)
    front = _front(a, _framework(framework), kind)
    _warm_exact(front, (((8, 4), F32),))
    a.close()
    request = ((8, 4) if how == "exact" else (9, 4), F32)
    for call in CALLS:
        with pytest.raises(ArenaClosedError):
            _request(front, call, request)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_planned_request_larger_than_the_locked_buffer_is_refused(
    framework: str, kind: str
) -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", debug=kind.startswith("debug")) as a:
        front = _front(a, _framework(framework), kind)
        _warm_exact(front, (((16, 4), F32),))
        a.lock()
        before = list(source.events)
        for shape in ((4096, 4), (17, 4)):  # far past, and just past, the 256-byte buffer
            assert front.try_get_simultaneous((shape, F32)) is None
            with pytest.raises(ArenaLockedError):
                front.get_simultaneous((shape, F32))
        (fits,) = front.get_simultaneous(((15, 4), F32))  # exactly the capacity still fits
        assert tuple(fits.shape) == (15, 4)
        (full,) = front.get_simultaneous(((16, 4), F32))
        assert tuple(full.shape) == (16, 4)
        assert source.events == before


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("how", ["exact", "plan"])
def test_a_remembered_or_planned_request_during_a_capture_keeps_its_buffer(
    framework: str, kind: str, call: str, how: str
) -> None:
    probe = Probe()
    source = RecordingSource()
    with Arena(
        source=source, framework="numpy", capture_probe=probe, debug=kind.startswith("debug")
    ) as a:
        front = _front(a, _framework(framework), kind)
        _warm_exact(front, (((8, 4), F32),))
        probe.capturing = True
        views = _request(front, call, ((8, 4) if how == "exact" else (9, 4), F32))
        assert views is not None
        probe.capturing = False
        a.get_simultaneous(((1 << 16,), F32))  # a later growth must retire, not release
        assert ("release", 256) not in source.events
        assert a.stats().slots[0].retired_buffers == 1
        assert a.release_retired() == 0  # captured: kept until close()


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_every_served_request_is_counted_once_whichever_path_serves_it(
    framework: str, kind: str, call: str
) -> None:
    with _arena(kind) as a:
        front = _front(a, _framework(framework), kind)
        requests = [((8, 4), F32)] * 4 + [((9, 4), F32), ((0, 4), F32), ((8, 4), F32)]
        for count, request in enumerate(requests, 1):
            _request(front, call, request)
            assert a.stats().calls == count
            assert a.stats().slots[0].calls == count
        a.lock()
        for count, request in enumerate(requests, len(requests) + 1):
            _request(front, call, request)
            assert a.stats().calls == count


def _site_a(front: Any, call: str) -> Any:
    if call == "get":
        return front.get_simultaneous(((8, 4), F32))
    return front.try_get_simultaneous(((8, 4), F32))


def _site_b(front: Any, call: str) -> Any:
    if call == "get":
        return front.get_simultaneous(((8, 4), F32))
    return front.try_get_simultaneous(((8, 4), F32))


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_remembered_request_from_a_new_call_site_is_recorded_while_unlocked(
    framework: str, kind: str, call: str
) -> None:
    with _arena(kind) as a:
        front = _front(a, _framework(framework), kind)
        for _ in range(3):
            _site_a(front, call)  # remembered now
        _site_b(front, call)  # a hit, from another line
        sites = a.stats().call_sites
        assert sorted(n for site, n in sites.items() if "_site_" in site) == [256, 256]
        assert any("_site_b" in site for site in sites)
        a.lock()
        _request(front, call, ((8, 4), F32))  # locked hits record nothing
        assert a.stats().call_sites == sites


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("how", ["exact", "plan"])
def test_the_high_water_mark_counts_requests_served_without_growth(
    framework: str, kind: str, how: str
) -> None:
    with _arena(kind) as a:
        front = _front(a, _framework(framework), kind)
        a.reserve_bytes(1 << 16)
        _warm_exact(front, (((8, 4), F32),))
        assert a.stats().slots[0].high_water == 256
        front.get_simultaneous(((100, 4), F32) if how == "plan" else ((8, 4), F32))
        expected = 1792 if how == "plan" else 256
        assert a.stats().slots[0].high_water == expected
        # Smaller requests, by every path (a hit or a plan; a zero-byte request and one
        # with an empty view go the general path): the mark never goes down.
        for smaller in [(((2, 4), F32),), (((0, 4), F32),), (((0, 4), F32), ((2, 4), F32))]:
            front.get_simultaneous(*smaller)
            assert a.stats().slots[0].high_water == expected
        assert a.stats().slots[0].capacity == 1 << 16


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_remembered_request_is_served_again_whenever_nothing_is_due(framework: str) -> None:
    """A cached front hands out the very same objects for a repeated request unless the
    slot's buffer changed or a growth is due: a sibling growing to the slot's own size,
    the slot growing to exactly what a sibling asked, and lock() finding nothing to size
    leave nothing due."""
    with Arena("cpu", ubatches=2, framework="numpy") as a:
        front = _front(a, _framework(framework), "cached")
        request = ((1000,), F32)
        (p,) = front.get_simultaneous(request)  # ubatch 0: 4096 bytes
        with a.ubatch(1):
            (s,) = front.get_simultaneous(request)  # grows to exactly the pending 4096
            (t,) = front.get_simultaneous(request)
            assert s is t
        (q,) = front.get_simultaneous(request)  # the sibling's growth to the same size
        assert p is q
        front.get_simultaneous(((0, 4), F32))  # served by the general path, no growth
        (q,) = front.get_simultaneous(request)
        assert p is q
        a.lock()  # nothing to size
        (r,) = front.get_simultaneous(request)
        assert r is p
        with a.ubatch(1):
            (u,) = front.get_simultaneous(request)
            assert u is s
        assert [x.capacity for x in a.stats().slots] == [4096, 4096]


def test_a_zero_byte_request_on_a_slot_that_holds_no_memory_is_remembered() -> None:
    with Arena("cpu", framework="numpy") as a:
        front = a.front("numpy", cached=True)
        (first,) = front.get_simultaneous(((0, 4), F32))
        (second,) = front.get_simultaneous(((0, 4), F32))
        assert first is second and a.stats().allocations == 0
