"""Gaps the mutation rerun of the plans group found (issue 26, item 12): each test fails on
the mutants it names (applied by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

import hashlib
import linecache
from typing import Any

import pytest

from arena import Arena
from arena.views import plan


def _register(code: str) -> tuple[str, dict[str, Any]]:
    namespace: dict[str, Any] = {}
    plan.generated(code, "probe", namespace)
    return f"<arena probe {hashlib.sha1(code.encode()).hexdigest()[:12]}>", namespace


def test_generated_code_is_in_linecache_newest_last_and_trimmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # plan.py generated #1, #4, #7 (the name's digest), #11 (lines without their ends),
    # #12 (code registered again not moved to the newest), #16 (one entry too few kept),
    # #17, #18, #19, #21, #22 (the trim), #23 (an entry someone else already dropped from
    # linecache).
    monkeypatch.setattr(plan, "MAX_SOURCES", 2)
    a, namespace = _register("a = 1\nb = 2\n")
    assert (namespace["a"], namespace["b"]) == (1, 2)
    assert linecache.getlines(a) == ["a = 1\n", "b = 2\n"]
    assert linecache.cache[a][:2] == (len("a = 1\nb = 2\n"), None)
    b, _ = _register("b = 1\n")
    _register("a = 1\nb = 2\n")  # the same code again: now the newest
    c, _ = _register("c = 1\n")  # trims the oldest, b
    assert linecache.getlines(a) == ["a = 1\n", "b = 2\n"]
    assert linecache.getlines(c) == ["c = 1\n"]
    assert linecache.getlines(b) == []
    linecache.clearcache()  # another library empties linecache: trimming goes on
    d, namespace = _register("d = 1\n")
    assert namespace["d"] == 1 and linecache.getlines(d) == ["d = 1\n"]


def test_a_step_of_a_debug_arena_retires_the_views_it_releases() -> None:
    # front.py Front.step #7: the step made with debug=None, so debug mode's retirement of
    # a released step view (torch: an empty storage) was off.
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", debug=True) as ws, ws.torch.step("s") as step:
        (view, kept) = step.get_simultaneous(((4,), "float32"), ((4,), "float32"))
        step.release(view)
        assert isinstance(view, torch.Tensor) and view.numel() == 0
        assert kept.numel() == 4


def test_the_largest_structure_that_gets_generated_code_gets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # plan.py _small #5 (views counted from 2), #7 (a view of MAX_GENERATED_DIMS dims
    # refused), #8 (MAX_GENERATED_VIEWS views refused): Round 6.
    compiled: list[str] = []
    real = plan.generated
    monkeypatch.setattr(plan, "generated", lambda code, *a: (compiled.append(code), real(code, *a)))
    deep = (1,) * (plan.MAX_GENERATED_DIMS - 1)
    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 20)
        for n in range(plan.GENERATE_AFTER + 1):
            views = a.get_simultaneous(
                *[((*deep, k + 1), "float32") for k in range(plan.MAX_GENERATED_VIEWS - 1)],
                ((*deep, n + 1), "float32"),
            )
            assert [v.shape[-1] for v in views][-1] == n + 1
        assert len(compiled) == 1 and compiled[0].startswith("def build(")
        assert compiled[0].count("view(src") == plan.MAX_GENERATED_VIEWS


def test_a_cached_fronts_replayed_step_hands_out_its_remembered_views(hit_path: str) -> None:
    # builder.py ViewBuilder.remember #2 (kept under the key None): a step's replayed
    # views were never found again, so every replay built new ones (a cached front hands
    # out the same objects; on the compiled path every replay took the Python path).
    with Arena("cpu", framework="numpy", cached_views=True) as a:
        runs = []
        for _ in range(5):
            with a.step("s") as st:
                runs.append(st.get_simultaneous(((4, 8), "float32"), ((16,), "int32")))
        assert all(x is y for x, y in zip(runs[-2], runs[-1], strict=True))
        assert all(x is y for x, y in zip(runs[-3], runs[-1], strict=True))


class _TrimmedMeanwhile(dict):  # type: ignore[type-arg]
    """The generated-code registry as a thread sees it while another trims it: iterating
    raises, as a dict changed during iteration does."""

    def __iter__(self) -> Any:
        raise RuntimeError("dictionary changed size during iteration")


def test_generated_code_runs_when_another_thread_trims_the_registry_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # plan.py generated #20 (accepted before: `return` for `break` when the trim races
    # another thread's): the code was then never run, and its builder never defined.
    monkeypatch.setattr(plan, "MAX_SOURCES", 0)
    monkeypatch.setattr(plan, "_SOURCES", _TrimmedMeanwhile())
    namespace: dict[str, Any] = {}
    plan.generated("raced = 7\n", "probe", namespace)
    assert namespace["raced"] == 7
