"""A replayed step's release() of a view it handed out is served by the compiled release
(found by its address, newest record first), with the Python release's outcome (issue 32
item 3)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError
from arena.planning.runs import POINTER
from arena.planning.steps import Step
from arena.views import hit

F32 = "float32"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = Step._python_release

    def counted(self: Step[Any], *views: Any) -> None:
        calls[0] += 1
        original(self, *views)

    monkeypatch.setattr(Step, "_python_release", counted)
    return calls


def _layer(ws: Arena, log: list[Any]) -> None:
    """Releases of a recent view, of an old one (past the last four requests), of two at
    once, a double release and an unknown view."""
    with ws.step("layer") as st:
        views = [st.get_simultaneous(((16 * (i + 1),), F32))[0] for i in range(7)]
        a, b = st.get_simultaneous(((8,), F32), ((8,), "int32"))
        st.release(views[6])  # recent
        st.release(views[0])  # old: past the last four requests
        st.release(a)
        with pytest.raises(ArenaError) as twice:
            st.release(a)
        with pytest.raises(ArenaError) as unknown:
            st.release(object())
        st.release(views[1], views[2])  # two at once
        st.release(b)
        (c,) = st.get_simultaneous(((16,), F32))
        log.append(
            (
                str(twice.value),
                str(unknown.value),
                [ws.numpy.data_ptr(v) for v in (*views, a, b, c)],
                sys.getrefcount(views[6]),
                sys.getrefcount(b),
            )
        )


def _both_paths(
    monkeypatch: pytest.MonkeyPatch, program: Callable[[Arena, list[Any]], None], ptrs: int
) -> dict[str, tuple[list[Any], int]]:
    """``program`` run on each hit path: three warm-up runs, lock, one locked run; per path
    the log (entry ``ptrs`` holds pointers, made relative to the locked run's lowest) and
    how many releases the locked run left to Python."""
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    results = {}
    for path in ("compiled", "python"):
        monkeypatch.setattr(hit, "HIT_PATH", path)
        python = _counting(monkeypatch)
        log: list[Any] = []
        with Arena("cpu", framework="numpy") as ws:
            ws.reserve_bytes(1 << 16)
            for _ in range(3):
                program(ws, log)
            ws.lock()
            python[0] = 0
            program(ws, log)
            origin = min(log[-1][ptrs])
            log = [
                (*entry[:ptrs], [p - origin for p in entry[ptrs]], *entry[ptrs + 1 :])
                for entry in log
            ]
        results[path] = (log, python[0])
        monkeypatch.undo()
    assert results["compiled"][0] == results["python"][0]
    return results


def test_the_compiled_release_serves_recent_views_with_the_python_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results = _both_paths(monkeypatch, _layer, 2)
    # Left to Python: the double release and the unknown view (the pair is served in C
    # since a release of several views is compiled, and the old view is found by its
    # address in C too).
    assert results["compiled"][1] == 2


def test_a_view_released_by_either_release_is_not_live(hit_path: str) -> None:
    """A view released alone and two released at once (the checked path while recording,
    the hot path in a replay) are all released: the second release is refused, and none of
    their blocks is live."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as st:
                x, y = st.get_simultaneous(((8,), F32), ((8,), F32))
                (z,) = st.get_simultaneous(((8,), F32))
                st.release(y)  # compiled in a replay: nothing indexed
                st.release(x, z)  # two at once
                with pytest.raises(ArenaError, match="released already"):
                    st.release(y)
                st.get_simultaneous(((8,), F32))
                found = [st.run.holder(v) for v in (x, y, z)]
                assert all(f is not None and f[2] for f in found)  # released, all three
                if st.replay:  # found by their records: blocks 0 to 2; only block 3 live
                    assert [f[0] for f in found if f is not None] == [0, 1, 2]
                    assert st.run.live_extent(st._book)[2] == (3,)


def _older(ws: Arena, log: list[Any]) -> None:
    """Releases of old views (past the compiled release's window of recent requests)
    once a release of two views has indexed the run: found in the index."""
    with ws.step("older") as st:
        views = [st.get_simultaneous(((16 * (i + 1),), F32))[0] for i in range(12)]
        st.release(views[10], views[11])  # two at once (the checked path indexed the run)
        st.release(views[0])  # old, indexed: live in the index
        st.release(views[3])
        with pytest.raises(ArenaError) as twice:
            st.release(views[0])
        (c,) = st.get_simultaneous(((16,), F32))
        log.append(
            (
                str(twice.value),
                sorted(st.run.released),
                sorted(st.run.lasts.items()),
                [ws.numpy.data_ptr(v) for v in (*views, c)],
                sys.getrefcount(views[3]),
            )
        )


def test_the_compiled_release_finds_old_views_in_the_runs_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results = _both_paths(monkeypatch, _older, 3)
    # Left to Python: the double release; the pair is compiled (a release of several
    # views is, since 2026-12-02) and the old views are found by their addresses.
    assert results["compiled"][1] == 1


def _attempt(st: Any, *views: Any) -> str:
    """What release(*views) did: "released", or the refusal's message."""
    try:
        st.release(*views)
    except ArenaError as error:
        return str(error)
    return "released"


#: The arena and its previous run's views, kept by the caller past the run's end.
_PREVIOUS: list[Any] = []


def _bad(ws: Arena, log: list[Any]) -> None:
    """Good and bad releases in a replay that keeps no view it handed out (NumPy): a view
    that died (its address reused, the record forged as CPython would reuse it) by an
    array whose data start elsewhere (refused) and by a view starting at its first byte,
    in another shape, made after it died (accepted: it stands for the dead view's block);
    the previous run's views, a slice, a double release, a view given twice, an object;
    and whether a dropped view is freed at once."""
    with ws.step("bad") as st:
        (a,) = st.get_simultaneous(((16,), F32))
        (b,) = st.get_simultaneous(((32,), F32))
        (c,) = st.get_simultaneous(((16,), F32))
        (d,) = st.get_simultaneous(((8,), F32))
        dropped = weakref.ref(d)
        del d
        outcomes = [dropped() is None]
        previous = _PREVIOUS[1:] if _PREVIOUS and _PREVIOUS[0] is ws else []
        _PREVIOUS[:] = [ws, a, b, c]
        ids = st.run.ids
        if previous and st.replay:
            # b died, and a slice of a (its data start at a's byte) took its address:
            # refused.
            other = a[:8]
            ids[8:16] = POINTER.pack(id(other))
            outcomes.append(_attempt(st, other))
            # Then a view starting at b's first byte, in another shape, made from the
            # previous run's b.
            standin = previous[1].reshape(4, 8)
            ids[8:16] = POINTER.pack(id(standin))
            outcomes.append(_attempt(st, standin))
            outcomes.append(_attempt(st, standin))  # released already
        else:
            outcomes.append(_attempt(st, b))
        outcomes.append(_attempt(st, *previous[:1]) if previous else "-")  # not this run's
        outcomes.append(_attempt(st, a[:]))  # a slice of a live view: refused
        outcomes.append(_attempt(st, a, a))  # given twice: refused, nothing released
        outcomes.append(_attempt(st, object()))
        outcomes.append(_attempt(st, a))
        outcomes.append(_attempt(st, a))  # released already
        outcomes.append(_attempt(st, c))
        (e,) = st.get_simultaneous(((16,), F32))  # a's or c's bytes
        log.append((outcomes, sorted(st.run.released), [ws.numpy.data_ptr(v) for v in (a, c, e)]))


def test_bad_releases_have_one_outcome_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    _PREVIOUS.clear()
    results = _both_paths(monkeypatch, _bad, 2)
    log = results["compiled"][0]
    outcomes = log[0][0]  # the recording run (it keeps its views): no forging
    assert outcomes[1] == outcomes[6] == outcomes[8] == "released"
    assert outcomes[2] == "-"
    not_this_run = "(not handed out by this run)"
    # The replays served from remembered views keep none they hand out: a dropped view is
    # freed at once (the first replay places its views and keeps them).
    assert [entry[0][0] for entry in log] == [False, False, True, True]
    for outcomes, released, _ in log[1:]:  # the replays (the last one locked)
        assert not_this_run in outcomes[1]  # data elsewhere at a dead view's address
        assert outcomes[2] == "released"  # data at its first byte stand for the dead view
        assert "(released already)" in outcomes[3]
        assert not_this_run in outcomes[4]  # the previous run's view
        assert not_this_run in outcomes[5]  # a slice
        assert "(released twice in this call)" in outcomes[6]
        assert not_this_run in outcomes[7]
        assert outcomes[8:] == ["released", outcomes[9], "released"]
        assert "(released already)" in outcomes[9]
        assert released == [0, 1, 2]
    # Left to Python (locked): the forged other layout, released already (twice), the
    # previous run's view, the slice, the pair, the object.
    assert results["compiled"][1] == 7


def test_a_replay_finds_the_newest_view_at_a_reused_address(hit_path: str) -> None:
    """A view dropped, its address reused by a later request's view (the record forged,
    as CPython reuses addresses): release() finds the live view, the newest record at its
    address, and the dropped view's block stays live."""
    with Arena("cpu", framework="numpy") as ws:
        for run in range(4):
            if run == 3:
                ws.lock()
            with ws.step("drops") as st:
                for n in range(6):
                    st.get_simultaneous(((8 * (n + 1),), F32))  # dropped at once
                (last,) = st.get_simultaneous(((8,), F32))
                if st.replay:
                    st.run.ids[8:16] = POINTER.pack(id(last))  # block 1's view died here
                    st.run.ids[24:32] = POINTER.pack(id(last))  # and block 3's after it
                st.release(last)
                with pytest.raises(ArenaError, match="released already"):
                    st.release(last)
                if st.replay:
                    assert st.run.released == {6}


class _Subclass(np.ndarray):  # type: ignore[type-arg]
    """An array type of another class than the views the NumPy front hands out."""


def test_a_replay_refuses_an_object_of_another_type_at_a_dead_views_address(
    hit_path: str,
) -> None:
    """A view that died, its address reused (the record forged, as CPython reuses
    addresses) by an object of another type: refused, even an array subclass over the
    very bytes of the dead view. Only an exact NumPy array starting at the block's first
    byte stands for the view handed out there."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(4):  # record, plan, then replays that keep no view they hand out
            with ws.step("types") as st:
                (a,) = st.get_simultaneous(((16,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                if st.replay:
                    for other in (b.view(_Subclass), object()):
                        st.run.ids[8:16] = POINTER.pack(id(other))  # b died, other took it
                        with pytest.raises(ArenaError, match="not handed out by this run"):
                            st.release(other)
                    st.run.ids[8:16] = POINTER.pack(id(b))
                st.release(a, b)


def test_a_torch_replay_refuses_a_numpy_array_at_a_dead_views_address(hit_path: str) -> None:
    """The same for a front whose views are no NumPy arrays: an exact NumPy array at
    the address of a dead torch view stands for nothing the run handed out, and
    release() refuses it with its usual error."""
    pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as ws:
        for _ in range(4):
            with ws.step("types") as st:
                (a,) = st.get_simultaneous(((16,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                if st.replay:
                    other = np.zeros(16, np.float32)
                    st.run.ids[8:16] = POINTER.pack(id(other))  # b died, other took it
                    with pytest.raises(ArenaError, match="not handed out by this run"):
                        st.release(other)
                    st.run.ids[8:16] = POINTER.pack(id(b))
                st.release(a, b)


def test_an_address_found_only_across_two_records_stands_for_no_view(hit_path: str) -> None:
    """The run's index of addresses is searched for a view's address from its newest
    record down; a match that straddles two records (the last bytes of one address and
    the first of the next, forged here) is no record: the search goes on below it and
    release() refuses the object, as one the run never handed out."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(4):
            with ws.step("straddled") as st:
                (a,) = st.get_simultaneous(((16,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                if st.replay:
                    other = object()
                    kept = bytes(st.run.ids[:16])
                    st.run.ids[:16] = bytes(4) + POINTER.pack(id(other)) + bytes(4)
                    with pytest.raises(ArenaError, match="not handed out by this run"):
                        st.release(other)
                    st.run.ids[:16] = kept
                st.release(a, b)
