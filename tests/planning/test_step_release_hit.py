"""A replayed step's release() of one of its last requests' views is served by the
compiled release without indexing the run's views, with the Python release's outcome
(issue 32 item 3)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena, ArenaError
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
    # Left to Python: the old view, the double release, the unknown view, the pair.
    assert results["compiled"][1] == 4


def test_a_view_released_before_indexing_is_not_indexed_as_live(hit_path: str) -> None:
    """A view the compiled release released before the run was indexed (a release of
    two views indexes it) is not indexed as live: its second release is refused."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as st:
                x, y = st.get_simultaneous(((8,), F32), ((8,), F32))
                (z,) = st.get_simultaneous(((8,), F32))
                st.release(y)  # compiled in a replay: nothing indexed
                st.release(x, z)  # indexes every view handed out so far
                with pytest.raises(ArenaError, match="released already"):
                    st.release(y)
                st.get_simultaneous(((8,), F32))
                st.run.index()
                assert not {id(x), id(y), id(z)} & set(st.run.views)  # none of them live


def _older(ws: Arena, log: list[Any]) -> None:
    """Releases of old views (past the compiled release's window of recent requests)
    once a release of two views has indexed the run: found in the index."""
    with ws.step("older") as st:
        views = [st.get_simultaneous(((16 * (i + 1),), F32))[0] for i in range(12)]
        st.release(views[10], views[11])  # two at once: indexes every view so far
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
    # Left to Python: the pair and the double release; the old views were indexed.
    assert results["compiled"][1] == 2
