"""The compiled and the pure-Python hit paths serve the same views and keep the same books.

Every test runs once per path (the ``hit_path`` fixture); ``compiled`` skips where the
extension is not built, and fails instead under ``ARENA_REQUIRE_COMPILED=1`` (CI).
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

import arena
from arena import Arena, SpecError
from arena.front import CompiledFront, Front

F32 = "float32"
SPECS = (((4, 8), F32), ((16,), "int32"), ((), "float16"))


def _front_is(front: Any, hit_path: str) -> None:
    assert (type(front) is CompiledFront) == (hit_path == "compiled")
    assert isinstance(front, Front)


def _pointers(front: Any, views: list[Any]) -> list[int]:
    return [front.data_ptr(v) for v in views]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_hit_hands_out_new_objects_over_the_remembered_bytes(
    hit_path: str, framework: str
) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        _front_is(front, hit_path)
        first = front.get_simultaneous(*SPECS)  # the general path: remembered
        a.lock()
        calls = a.stats().calls
        again = front.get_simultaneous(*SPECS)
        third = front.try_get_simultaneous(*SPECS)
        assert third is not None
        for views in (again, third):
            assert all(x is not y for x, y in zip(first, views, strict=True))
            assert _pointers(front, views) == _pointers(front, first)
            assert [tuple(v.shape) for v in views] == [(4, 8), (16,), ()]
        assert a.stats().calls == calls + 2
        slot = front._select()
        (entry,) = slot.buffer.prepared[front._key].values()
        assert entry.used  # the cache's sweep spares it


def test_a_cached_front_hands_out_the_same_objects(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", cached_views=True) as a:
        first = a.get_simultaneous(*SPECS)
        again = a.get_simultaneous(*SPECS)
        assert again is not first and all(x is y for x, y in zip(first, again, strict=True))


@pytest.mark.parametrize(
    ("dim", "pattern"),
    [(4.0, "use 4"), (True, "bool"), (np.int64(4), None)],
    ids=["float", "bool", "numpy-int"],
)
def test_a_dimension_equal_to_a_remembered_int_takes_the_checked_path(
    hit_path: str, dim: Any, pattern: str | None
) -> None:
    """4.0, True and np.int64(4) hash and compare like 4 (and 1): the lookup finds the
    remembered (4,) request, and only the exact-int check sends them on."""
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((4,), F32))
        a.get_simultaneous(((1,), F32))
        a.get_simultaneous(((1,), F32))  # remembered from its second sighting (a plan)
        if pattern is None:
            (view,) = a.get_simultaneous(((dim,), F32))
            assert view.shape == (4,)
        else:
            with pytest.raises(SpecError, match=pattern):
                a.get_simultaneous(((dim,), F32))


class Tuple(tuple):  # type: ignore[type-arg]
    """A tuple subclass: equal to and hashing like the plain tuple."""


def test_requests_are_found_again_after_growth_sweeps_and_across_slots(hit_path: str) -> None:
    """A small cache swept all the time, two slots and growth between rounds: every request
    gets its own views (shapes, and the second view right after the first's bytes)."""
    with Arena("cpu", framework="numpy", ubatches=2, max_cached_layouts=8) as a:
        requests = [(((n, 4), F32), ((n,), "int32")) for n in range(1, 80)]
        for growth in range(3):
            for ubatch in (0, 1, 0):
                with a.ubatch(ubatch):
                    for _ in range(2):
                        for specs in requests:
                            x, y = a.get_simultaneous(*specs)
                            n = specs[1][0][0]
                            assert x.shape == (n, 4) and y.shape == (n,)
                            gap = a.numpy.data_ptr(y) - a.numpy.data_ptr(x)
                            assert gap == -(-n * 16 // 256) * 256
            a.reserve_bytes(1 << (16 + growth))
        dtypes = ("float32", np.float32, np.dtype("float32"))  # equal, not the same object
        for dtype in dtypes:
            (v,) = a.get_simultaneous(((3, 4), dtype))
            assert v.shape == (3, 4) and v.dtype == np.float32


def test_list_specs_and_tuple_subclasses_are_served_like_tuples(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        (x,) = a.get_simultaneous(((2, 4), F32))
        (y,) = a.get_simultaneous([[2, 4], F32])  # unhashable: never a hit
        (z,) = a.get_simultaneous(Tuple((Tuple((2, 4)), F32)))
        assert x.shape == y.shape == z.shape == (2, 4)
        assert a.numpy.data_ptr(x) == a.numpy.data_ptr(y) == a.numpy.data_ptr(z)


def test_each_thread_gets_the_slot_of_its_micro_batch(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.reserve(*SPECS)
        a.lock()
        mine = a.get_simultaneous(*SPECS)
        with a.ubatch(1):
            other = a.get_simultaneous(*SPECS)
            other_again = a.get_simultaneous(*SPECS)
        seen: list[list[Any]] = []

        def bound() -> None:
            a.bind_ubatch(1)
            seen.append(a.get_simultaneous(*SPECS))

        thread = threading.Thread(target=bound)
        thread.start()
        thread.join(10)
        ptrs = _pointers(a.numpy, other)
        assert _pointers(a.numpy, mine) != ptrs
        assert _pointers(a.numpy, other_again) == ptrs == _pointers(a.numpy, seen[0])
        assert _pointers(a.numpy, a.get_simultaneous(*SPECS)) == _pointers(a.numpy, mine)


def test_a_new_binding_never_reads_a_dropped_one_s_value() -> None:
    """The per-thread micro-batch binding (compiled or not): a binding made where a dropped
    one lived (the allocator reuses the address at once) starts at 0 in every thread."""
    from arena.views.hit import Binding

    reused = 0
    for _ in range(200):
        old = Binding()
        old.ubatch = 1
        assert old.ubatch == 1  # read: the compiled binding caches it for this thread
        address = id(old)
        del old
        new = Binding()
        reused += id(new) == address
        assert new.ubatch == 0
    assert reused or Binding.__module__ == "arena.views.hit"  # the Python one: no reuse needed


def test_threads_binding_in_turn_keep_their_own_slots(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.reserve(*SPECS)
        a.lock()
        mine: dict[int, list[int]] = {}
        for ubatch in (0, 1):
            with a.ubatch(ubatch):
                mine[ubatch] = _pointers(a.numpy, a.get_simultaneous(*SPECS))
        errors: list[str] = []
        barrier = threading.Barrier(2)

        def work(ubatch: int) -> None:
            barrier.wait(10)
            for step in range(300):
                if step % 7 == 0:
                    a.bind_ubatch(ubatch)  # a write: every thread's cached read goes stale
                if _pointers(a.numpy, a.get_simultaneous(*SPECS)) != mine[ubatch]:
                    errors.append(f"ubatch {ubatch} step {step}")

        threads = [threading.Thread(target=work, args=(u,)) for u in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []


def test_resolvers_and_lanes_choose_the_slot(hit_path: str) -> None:
    choice = {"ubatch": 0}
    with Arena(
        "cpu", framework="numpy", ubatches=2, lanes=2, ubatch_resolver=lambda: choice["ubatch"]
    ) as a:
        a.reserve(*SPECS)
        seen = set()
        for ubatch in (0, 1):
            choice["ubatch"] = ubatch
            for lane in (0, 1):
                with a.lane(lane):
                    for _ in range(2):  # the second is a hit
                        seen.add(tuple(_pointers(a.numpy, a.get_simultaneous(*SPECS))))
        assert len(seen) == 4


class Slot1(enum.IntEnum):
    FIRST = 0
    SECOND = 1


class Liar(int):
    """An int whose own arithmetic, comparisons and conversions all say 0 (or yes)."""

    def __index__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    def __mul__(self, other: object) -> int:
        return 0

    __rmul__ = __add__ = __radd__ = __mul__

    def __lt__(self, other: object) -> bool:
        return True

    __le__ = __gt__ = __ge__ = __lt__


@pytest.mark.parametrize("kind", [Slot1, Liar], ids=["IntEnum", "int-subclass"])
@pytest.mark.parametrize("lanes", [1, 2])
def test_an_int_subclass_binds_the_slot_of_its_value(hit_path: str, kind: Any, lanes: int) -> None:
    """``bind_ubatch``, ``ubatch()`` and ``lane()`` take an int subclass as its value: both
    hit paths serve that slot, and the subclass's own methods are never asked."""
    one = kind(1)
    with Arena("cpu", framework="numpy", ubatches=2, lanes=lanes) as a:
        a.reserve(*SPECS)
        a.lock()
        plain = {}
        for ubatch in (0, 1):
            for lane in range(lanes):
                with a.ubatch(ubatch), a.lane(lane):
                    plain[ubatch, lane] = _pointers(a.numpy, a.get_simultaneous(*SPECS))
        lane_one = kind(lanes - 1)
        with a.ubatch(one), a.lane(lane_one):
            for _ in range(3):  # the general path, then hits
                assert _pointers(a.numpy, a.get_simultaneous(*SPECS)) == plain[1, lanes - 1]
            assert a.current_slot() == (1, lanes - 1)
            assert all(type(i) is int for i in a.current_slot())
        seen: list[tuple[Any, ...]] = []

        def bound() -> None:
            a.bind_ubatch(one)
            seen.append((a.current_slot(), _pointers(a.numpy, a.get_simultaneous(*SPECS))))
            seen.append((a.current_slot(), _pointers(a.numpy, a.get_simultaneous(*SPECS))))

        thread = threading.Thread(target=bound)
        thread.start()
        thread.join(10)
        assert seen == [((1, 0), plain[1, 0])] * 2
        with pytest.raises(arena.SlotError, match="ubatch 5 is out of range"):
            a.bind_ubatch(kind(5) if kind is Liar else 5)
        with pytest.raises(arena.SlotError, match="lane 7 is out of range"):
            a.lane(kind(7) if kind is Liar else 7).__enter__()
        assert a.current_slot() == (0, 0)


def test_a_sibling_s_growth_is_matched_before_a_hit(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(1):
            a.get_simultaneous(*SPECS)
            a.get_simultaneous(*SPECS)
        a.get_simultaneous(((1 << 16,), F32))  # ubatch 0 grows: ubatch 1 grows to match
        with a.ubatch(1):
            a.get_simultaneous(*SPECS)  # would be a hit, but the slot must grow first
        capacities = {s.capacity for s in a.stats().slots}
        assert len(capacities) == 1


def test_unlocked_hits_record_their_call_site(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        for _ in range(3):
            a.numpy.get_simultaneous(((1000,), F32))  # the site: this line
        for _ in range(3):
            a.get_simultaneous(((2000,), F32))  # through the arena's own method
        sites = a.stats().call_sites
        assert len(sites) == 2, sites  # two lines of this function, not arena's own frames
        for site in sites:
            file, _, function = site.split(":")
            assert (file, function) == (
                "test_hit_paths.py",
                "test_unlocked_hits_record_their_call_site",
            )
        assert sorted(sites.values()) == [4096, 8192]


def _last_request_line(a: Arena) -> int:
    (segment,) = a.memory_snapshot()["segments"]
    (block,) = segment["blocks"]
    (frame,) = block["frames"]
    return int(frame["line"])


def test_the_last_request_per_slot_follows_every_hit(hit_path: str) -> None:
    """Hits noted without Python (the compiled path, a known call site) move the slot's
    last request too: here from line Y (a site's first hit, noted in Python) to line X."""
    with Arena("cpu", framework="numpy") as a:
        first = sys._getframe().f_lineno + 2
        for i in range(3):
            a.numpy.get_simultaneous(((1000,), F32))  # X
            if i == 0:
                a.numpy.get_simultaneous(((1000,), F32))  # Y: the last request after i == 0
                assert _last_request_line(a) == first + 2
        assert _last_request_line(a) == first


def test_a_hit_that_raises_its_site_s_peak_is_recorded(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        a.numpy.get_simultaneous(((2000,), F32))  # remembered (a site of its own)
        for size in (10, 2000):  # a known site, then a hit larger than its peak
            a.numpy.get_simultaneous(((size,), F32))
        peaks = sorted(a.stats().call_sites.values())
        assert peaks == [8192, 8192]


@pytest.mark.parametrize("locked", [True, False], ids=["locked", "unlocked"])
def test_a_hit_during_a_capture_keeps_its_buffer_until_close(hit_path: str, locked: bool) -> None:
    from tests.sources import RecordingSource

    capturing = [False]
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=lambda: capturing[0]) as a:
        for _ in range(3):  # remembered, and this call site known
            a.numpy.get_simultaneous(((256,), F32))
        if locked:
            a.lock()
        capturing[0] = True
        for _ in range(2):
            (view,) = a.numpy.get_simultaneous(((256,), F32))  # hits during a capture
        capturing[0] = False
        a.unlock()
        a.reserve_bytes(1 << 20)  # growth retires a captured buffer instead of releasing it
        assert a.release_retired() == 0
        ptr = a.numpy.data_ptr(view)
        assert any(start <= ptr < start + n for start, n in source.live.items())


def test_debug_mode_and_poison_serve_hits_through_python(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", poison=True) as a:
        (x,) = a.get_simultaneous(((8,), F32))
        x[...] = 1.0
        (y,) = a.get_simultaneous(((8,), F32))  # a hit, filled again
        assert np.isnan(y).all()
    with Arena("cpu", framework="numpy", debug=True) as a:
        a.get_simultaneous(((8,), F32))
        assert a.get_simultaneous(((8,), F32))[0].shape == (8,)


def test_a_locked_arena_refuses_growth_on_either_path(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((8,), F32))
        a.lock()
        assert a.try_get_simultaneous(((8,), F32)) is not None
        assert a.try_get_simultaneous(((1 << 20,), F32)) is None
        with pytest.raises(arena.ArenaLockedError):
            a.get_simultaneous(((1 << 20,), F32))
    with pytest.raises(arena.ArenaClosedError):
        a.get_simultaneous(((8,), F32))


def test_jax_fronts_are_served_by_python_on_either_path(hit_path: str) -> None:
    pytest.importorskip("jax")
    with Arena("cpu", framework="numpy") as a:
        front = a.jax
        (x,) = front.get_simultaneous(((8,), F32))
        (y,) = front.get_simultaneous(((8,), F32))
        assert x is not y and front.data_ptr(x) == front.data_ptr(y)


def test_an_open_scope_sends_plain_requests_above_it(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 16)
        (plain,) = a.get_simultaneous(((8,), F32))
        with a.scope() as scope:
            scope.get_simultaneous(((64,), F32))
            (above,) = a.get_simultaneous(((8,), F32))
        assert a.numpy.data_ptr(above) > a.numpy.data_ptr(plain)
        (again,) = a.get_simultaneous(((8,), F32))
        assert a.numpy.data_ptr(again) == a.numpy.data_ptr(plain)


PURE = """
import sys
import arena
from arena.views import hit
from arena.front import Front
assert hit.HIT_PATH == "python" and hit.compiled is None
assert "arena.views._hit" not in sys.modules
assert arena.__version__ and hit.HitBase is hit.PyHitBase
with arena.Arena("cpu", framework="numpy", ubatches=2) as a:
    specs = (((4, 8), "float32"), ((16,), "int32"))
    first = a.get_simultaneous(*specs)
    a.lock()
    again = a.get_simultaneous(*specs)
    assert type(a.numpy) is Front
    assert [v.__array_interface__["data"] for v in first] == [
        v.__array_interface__["data"] for v in again
    ]
print("ok")
"""


def test_arena_pure_python_loads_no_extension() -> None:
    env = {**os.environ, "ARENA_PURE_PYTHON": "1"}
    run = subprocess.run(
        [sys.executable, "-c", PURE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


CLOSED_DURING_LOOKUP = """
import arena
from arena.base.dtypes import DType

ws = arena.Arena("cpu", framework="numpy")


class Sneaky(DType):  # a dtype whose hash runs Python code: another thread may run then
    armed = False

    def __hash__(self):
        if Sneaky.armed:
            Sneaky.armed = False
            CLOSE()
        return hash((self.name, self.itemsize))


def close():
    ws.close()


CLOSE = close


def dtype():  # a new object per request: the lookup hashes it (no identity shortcut)
    return Sneaky("float32", 4)

for _ in range(2):  # remembered
    ws.get_simultaneous(((4,), dtype()))
if KIND == "step":
    for _ in range(3):
        with ws.step("s") as st:
            st.get_simultaneous(((4,), dtype()))
    Sneaky.armed = True
    try:
        with ws.step("s") as st:
            (view,) = st.get_simultaneous(((4,), dtype()))
            view[:] = 1.0
    except arena.ArenaClosedError:
        pass
else:
    Sneaky.armed = True
    try:
        (view,) = ws.get_simultaneous(((4,), dtype()))
        view[:] = 1.0  # a valid view: it owns its memory
    except arena.ArenaClosedError:
        pass
print("survived")
"""


@pytest.mark.parametrize("kind", ["plain", "step"])
@pytest.mark.parametrize("path", ["python", "compiled"])
def test_the_arena_closed_during_a_hits_lookup_never_crashes(path: str, kind: str) -> None:
    """A dtype's __hash__ runs Python code in the middle of a hit's lookup, and the arena
    is closed then (as another thread could): the hit must hold what it reads. Under
    PYTHONMALLOC=debug a read of freed memory crashes the interpreter."""
    from arena.views import hit

    if path == "compiled" and hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    env = {**os.environ, "PYTHONMALLOC": "debug"}
    if path == "python":
        env["ARENA_PURE_PYTHON"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", CLOSED_DURING_LOOKUP.replace("KIND", repr(kind))],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("cached", [False, True])
def test_an_empty_request_returns_an_empty_list_on_every_path(framework: str, cached: bool) -> None:
    pytest.importorskip(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework, cached=cached)
        assert front.get_simultaneous() == [] and front.try_get_simultaneous() == []
        front.get_simultaneous(((4,), F32))  # warm slot: plans exist
        assert front.get_simultaneous() == [] and front.get_simultaneous() == []
        a.lock()
        assert front.get_simultaneous() == []
