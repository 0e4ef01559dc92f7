"""Gaps that planted bugs and surviving mutants found in the suite (issue 26, item 12):
each test here fails on the bug or mutant it names and passes on the real code."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arena import Allocation, Arena, ArenaLockedError, SpecError
from arena.observe.profilefile import read_profile
from arena.views.dtypes import DType
from arena.views.layout import clear_layout_memo, compute_layout
from tests.gates import TIMEOUT
from tests.sources import RecordingSource

F32 = "float32"


# ------------------------------------------------------------------ persistent buffers
def test_a_persistent_buffer_under_key_none_is_not_every_new_keys_buffer() -> None:
    # persistent.py buffer #3: the first, unlocked look-up read the entry of key None.
    with Arena("cpu", framework="numpy") as a:
        none = a.get_persistent(None, (8,), F32)
        none[:] = 3.0
        other = a.get_persistent("other", (8,), F32, zero_init=True)
        assert a.numpy.data_ptr(other) != a.numpy.data_ptr(none)
        assert np.all(other == 0.0) and np.all(none == 3.0)
        assert a.stats().slots[0].persistent_keys == 2


def test_a_locked_buffer_request_does_not_name_a_sibling_that_has_a_resource_of_that_key() -> None:
    # persistent.py new_key_refused #6/#9/#10: a buffer's owners looked up among the
    # siblings' resources, so a resource of the same key was named as the buffer's creator.
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.get_persistent_resource("k", dict)
        a.lock()
        with a.ubatch(1), pytest.raises(ArenaLockedError) as info:
            a.get_persistent("k", (8,), F32)
    message = str(info.value)
    assert "new persistent buffer 'k'" in message
    assert "created it during warm-up" not in message
    assert "create persistent buffers during warm-up, before lock()" in message


class _RefusingFill(np.ndarray):
    """A block whose zeroing fails, as a device fault would."""

    def fill(self, value: Any) -> None:
        raise MemoryError("injected fault while zeroing")


@dataclass
class _ZeroingFaultSource(RecordingSource):
    """Hands out blocks whose ``fill`` raises from allocation number ``fail_at`` on."""

    fail_at: int = 0
    calls: int = 0

    def allocate(self, nbytes: int) -> Allocation:
        allocation = super().allocate(nbytes)
        self.calls += 1
        if self.calls == self.fail_at:
            owner = allocation.owner.view(_RefusingFill)
            return Allocation(allocation.ptr, allocation.nbytes, owner, allocation.device)
        return allocation


def test_a_failed_zeroing_gives_its_block_back_and_keeps_the_other_keys() -> None:
    # persistent.py create #20: the clean-up dropped the entry of key None instead of the
    # failed key's, losing a buffer whose contents the caller relies on.
    source = _ZeroingFaultSource(fail_at=2)
    a = Arena(source=source, framework="numpy")
    none = a.get_persistent(None, (8,), F32)
    none[:] = 7.0
    with pytest.raises(MemoryError, match="injected fault while zeroing"):
        a.get_persistent("x", (8,), F32, zero_init=True)
    assert a.stats().slots[0].persistent_keys == 1
    again = a.get_persistent(None, (8,), F32)
    assert a.numpy.data_ptr(again) == a.numpy.data_ptr(none) and np.all(again == 7.0)
    assert len(source.live) == 1  # the failed key's block went back
    x = a.get_persistent("x", (8,), F32, zero_init=True)  # the key can be created again
    assert np.all(x == 0.0)
    a.close()
    assert source.live == {}


# ------------------------------------------------------------------ the layout memo
class _SweepingDType(DType):
    """float32, whose hash (taken when the memo sweep drops its entry) lets another thread
    empty the memo first: the sweep then finds the entries after it gone."""

    armed = False

    def __hash__(self) -> int:
        if _SweepingDType.armed:
            _SweepingDType.armed = False
            other = threading.Thread(target=clear_layout_memo)
            other.start()
            other.join(TIMEOUT)
        return hash(("float32", 4))


def test_a_memo_sweep_survives_entries_another_thread_removed() -> None:
    # layout.py _compute_and_memoise #65: the sweep popped without a default and raised
    # KeyError for an entry a concurrent sweep had removed.
    clear_layout_memo()
    sweeping = _SweepingDType("float32", 4)
    try:
        first = compute_layout((((1,), sweeping),))  # the oldest entry
        # Its key is hashed again only when the sweep drops it (the memo keeps hashes).
        _SweepingDType.armed = True
        for n in range(2, 20000):
            layout = compute_layout((((n,), F32),))
            assert layout.total == 4 * n + (-4 * n) % 256
            if not _SweepingDType.armed:
                break
        assert not _SweepingDType.armed  # the sweep reached the entry
        assert first.total == 256
    finally:
        _SweepingDType.armed = False
        clear_layout_memo()


# ------------------------------------------------------------------ hits after warm-up
def _hit_front(a: Arena, framework: str, cached: bool) -> Any:
    if framework == "torch":
        pytest.importorskip("torch")
    return a.front(framework, cached=cached)


def _specs(dims: tuple[Any, ...], views: int) -> tuple[Any, ...]:
    return tuple(((dim, 4), F32) for dim in dims) + tuple(((3,), F32) for _ in range(views - 1))


BAD_DIMENSIONS = [(True, "bool"), (2.0, "use 2"), (np.True_, "bool"), (np.float64(2.0), "float64")]


@pytest.mark.parametrize("views", [2, 17])  # generated code up to 16 views, loops above
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(("bad", "word"), BAD_DIMENSIONS, ids=["True", "2.0", "np.True_", "np2.0"])
def test_after_many_requests_of_a_structure_its_plan_refuses_bool_and_float_dimensions(
    framework: str, cached: bool, views: int, bad: Any, word: str
) -> None:
    # Planted bug: the plan's generated code (made after GENERATE_AFTER = 64 builds) or
    # its closure (structures of more than 16 views) took True as 1 and 2.0 as 2.
    with Arena("cpu", framework="numpy") as a:
        front = _hit_front(a, framework, cached)
        a.reserve_bytes(1 << 20)
        for n in range(3, 3 + 100):  # new sizes every time: the plan builds each
            front.get_simultaneous(*_specs((n,), views))
        with pytest.raises(SpecError, match=word):
            front.get_simultaneous(*_specs((bad,), views))
        with pytest.raises(SpecError, match=word):
            front.try_get_simultaneous(*_specs((bad,), views))
        (view, *_) = front.get_simultaneous(*_specs((2,), views))
        assert tuple(view.shape) == (2, 4)


@pytest.mark.parametrize("views", [2, 17])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(("bad", "word"), BAD_DIMENSIONS, ids=["True", "2.0", "np.True_", "np2.0"])
def test_after_many_hits_of_one_request_an_equal_bool_or_float_dimension_is_refused(
    framework: str, cached: bool, views: int, bad: Any, word: str
) -> None:
    # Planted bug: the server of a remembered request (the hit) stopped checking that
    # each dimension is a plain int once it had served 64 times, or for more than 16 views.
    with Arena("cpu", framework="numpy") as a:
        front = _hit_front(a, framework, cached)
        plain = 1 if isinstance(bad, (bool, np.bool_)) else 2
        for _ in range(100):
            front.get_simultaneous(*_specs((plain,), views))
        asked = _specs((bad,), views)
        assert asked == _specs((plain,), views)  # the exact request's look-up finds it
        with pytest.raises(SpecError, match=word):
            front.get_simultaneous(*asked)
        with pytest.raises(SpecError, match=word):
            front.try_get_simultaneous(*asked)
        (view, *_) = front.get_simultaneous(*_specs((plain,), views))
        assert tuple(view.shape) == (plain, 4)


# ------------------------------------------------------------------ profiles
def test_a_profiles_planned_need_covers_the_largest_plain_request(tmp_path: Path) -> None:
    # Planted bug: the planned need was the furthest a planned step reaches, without the
    # largest request made outside every step; the restart was presized too small for it.
    path = tmp_path / "profile.json"
    plain = 64 * 1024
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for _ in range(3):  # record, plan, replay: the step needs 4 KiB
            with ws.step("small") as st:
                st.get_simultaneous(((1024,), F32))
            ws.get_simultaneous(((plain // 4,), F32))  # outside every step
        ws.lock()
        assert ws.stats().slots[0].capacity >= plain
    (slot,) = read_profile(path)["slots"]
    assert slot["planned"] == plain
    with Arena("cpu", framework="numpy", profile=path) as ws:
        assert ws.stats().slots[0].capacity == plain  # presized to hold the plain request
        ws.lock()
        with ws.step("small") as st:
            st.get_simultaneous(((1024,), F32))
        (big,) = ws.get_simultaneous(((plain // 4,), F32))  # locked: fits, no growth
        assert big.nbytes == plain
