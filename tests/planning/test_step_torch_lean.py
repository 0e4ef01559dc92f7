"""A quick torch replay keeps none of the tensors it hands out (issue 32): it knows each by
its address and by the remembered tensor it is a fresh view of, as a NumPy replay does,
on both hit paths."""

from __future__ import annotations

import contextlib
import gc
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena, ArenaError
from arena.planning.runs import POINTER
from arena.planning.steps import Step
from arena.views import hit
from tests.extensions import need_step_rows
from tests.refcounts import assert_counts_flat

torch = pytest.importorskip("torch")

F32 = torch.float32

MODES: dict[str, Callable[[], Any]] = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference": torch.inference_mode,
}


def _locked_runs(ws: Arena, key: str, body: Callable[[Any, int], None], runs: int = 5) -> None:
    """``body(step, run)`` in ``runs`` runs of step ``key``, the arena locked before the
    last (the compiled hit serves the locked replays)."""
    for run in range(runs):
        if run == runs - 1:
            ws.lock()
        with ws.step(key) as st:
            body(st, run)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_quick_torch_replay_frees_a_view_the_caller_drops(hit_path: str, mode: str) -> None:
    """A tensor a replay handed out and the caller dropped is freed at once, as a plain
    request's is, under every grad mode; its neighbour is still released by identity.
    Slip: the replay kept every tensor it handed out until its end (``runs.lean`` and the
    compiled hit took only NumPy arrays lean), which made a step's request 1.08 to 1.10 x
    a plain one in the bench."""
    freed = []

    def body(st: Any, run: int) -> None:
        (a,) = st.get_simultaneous(((4, 16), F32))
        (b,) = st.get_simultaneous(((8,), F32))
        if st.replay and run >= 2:
            ref = weakref.ref(a)
            del a
            gc.collect()
            freed.append(ref() is None)
            st.release(b)
            return
        st.release(a, b)

    with Arena("cpu", framework="torch") as ws, MODES[mode]():
        _locked_runs(ws, "dropped", body)
    assert freed == [True, True, True]


def _changes(view: Any) -> None:
    """In-place changes that leave the tensor's first byte where it was."""
    view.requires_grad_(False)
    view.resize_(8)
    view.unsqueeze_(0)


def test_a_torch_replay_releases_the_tensor_it_handed_out_after_changes_in_place(
    hit_path: str,
) -> None:
    """The very tensor a replay handed out is released after the caller changed its shape
    in place (``resize_`` to fewer elements, ``unsqueeze_``): it still starts at its
    block's first byte (``same_view``), on every run."""
    outcomes = []

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        _changes(view)
        try:
            st.release(view)
            outcomes.append("released")
        except ArenaError as exc:  # pragma: no cover (the failure's message)
            outcomes.append(f"run {run}: {exc}")

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "changed", body)
    assert outcomes == ["released"] * 5


def test_a_tensor_at_a_recorded_address_stands_for_the_block_only_over_its_bytes(
    hit_path: str,
) -> None:
    """An object at a view's recorded address (the record forged, as CPython reuses the
    address of a view that died) is released for that block only where it is a tensor
    starting at the block's first byte (a view of the same bytes), and refused where it
    starts elsewhere or is no tensor, on both hit paths; a refusal releases nothing."""
    outcomes: list[str] = []

    def body(st: Any, run: int) -> None:
        (a,) = st.get_simultaneous(((8,), F32))
        (b,) = st.get_simultaneous(((16,), F32))
        if st.replay and run >= 2:
            size = POINTER.size
            elsewhere = torch.zeros(16)
            same_bytes = b[:]  # a new tensor object starting where b does
            for stranger in (elsewhere, b.numpy(), same_bytes):
                st.run.ids[size : 2 * size] = POINTER.pack(id(stranger))
                try:
                    st.release(stranger)
                    outcomes.append("released")
                except ArenaError as exc:
                    outcomes.append("refused" if "not handed out" in str(exc) else str(exc))
            assert st.run.released == {1}
            st.release(a)
            return
        st.release(a, b)

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "forged", body)
    assert outcomes == ["refused", "refused", "released"] * 3


def test_a_tensor_pointed_elsewhere_in_place_is_refused(hit_path: str) -> None:
    """What a quick torch replay gives up for not keeping its tensors: one the caller
    pointed at other memory in place (``set_``) no longer starts at its block's first byte
    and is refused as a tensor made from the view is ("not handed out by this run"),
    releasing nothing. The recording and a checked replay (poisoning) still keep their
    tensors and release it by identity."""
    outcomes: list[tuple[str, list[int]]] = []

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        if run >= 3:
            view.set_(torch.zeros(16).untyped_storage())
            try:
                st.release(view)
                outcome = "released"
            except ArenaError as exc:
                outcome = "refused" if "not handed out" in str(exc) else str(exc)
            outcomes.append((outcome, sorted(st.run.released)))
            return
        st.release(view)

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "pointed", body)
    with Arena("cpu", framework="torch", poison=True) as ws:
        _locked_runs(ws, "pointed", body)
    refused, released = ("refused", []), ("released", [0])
    assert outcomes == [refused, refused, released, released]


def test_a_checked_torch_replay_keeps_the_tensors_it_hands_out(hit_path: str) -> None:
    """Under poisoning a replay is not quick: it keeps each tensor it hands out until its
    end (what release() compares by identity there)."""

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        if run < 4:
            st.release(view)
            return
        ref = weakref.ref(view)
        del view
        gc.collect()
        assert ref() is not None
        assert any(w is ref() for w in st.run.live_witnesses())

    with Arena("cpu", framework="torch", poison=True) as ws:
        _locked_runs(ws, "kept", body)


def _program(ws: Arena, log: list[Any]) -> None:
    """Requests and releases of one run: recent, old, two at once, twice, unknown."""
    with ws.step("layer") as st:
        views = [st.get_simultaneous(((16 * (i + 1),), F32))[0] for i in range(6)]
        a, b = st.get_simultaneous(((8,), F32), ((8,), torch.int32))
        st.release(views[5])
        st.release(views[0])
        st.release(a)
        with pytest.raises(ArenaError) as twice:
            st.release(a)
        with pytest.raises(ArenaError) as unknown:
            st.release(torch.zeros(3))
        st.release(views[1], views[2])
        st.release(b)
        (c,) = st.get_simultaneous(((16,), F32))
        log.append(
            (
                str(twice.value),
                str(unknown.value),
                [v.data_ptr() for v in (*views, a, b, c)],
                sorted(st.run.released),
                sys.getrefcount(views[5]),
                sys.getrefcount(b),
            )
        )


def test_torch_releases_have_one_outcome_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same program on each hit path: the same errors, pointers (from the lowest),
    released blocks and reference counts; the compiled release leaves to Python only the
    double release and the unknown tensor."""
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    results = {}
    for path in ("compiled", "python"):
        monkeypatch.setattr(hit, "HIT_PATH", path)
        calls = [0]
        original = Step._python_release

        def counted(
            self: Step[Any], *views: Any, _original: Any = original, _calls: Any = calls
        ) -> None:
            _calls[0] += 1
            _original(self, *views)

        monkeypatch.setattr(Step, "_python_release", counted)
        log: list[Any] = []
        with Arena("cpu", framework="torch") as ws:
            ws.reserve_bytes(1 << 16)
            for _ in range(3):
                _program(ws, log)
            ws.lock()
            calls[0] = 0
            _program(ws, log)
        origin = min(log[-1][2])
        log = [(*e[:2], [p - origin for p in e[2]], *e[3:]) for e in log]
        results[path] = (log, calls[0])
        monkeypatch.undo()
    assert results["compiled"][0] == results["python"][0]
    assert results["compiled"][1] == 2


def test_the_compiled_torch_release_holds_no_reference() -> None:
    """Reference counts stay flat over 10^5 compiled requests and releases of tensors (the
    data_ptr() comparison holds the view, its witness and the run's records while it runs,
    and gives each back)."""
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    with Arena("cpu", framework="torch") as ws:
        front = ws.front("torch")

        def run() -> Any:
            with front.step("flat") as st:
                for _ in range(100):
                    (view,) = st.get_simultaneous(((4, 16), F32))
                    st.release(view)
                caches = st._caches
                return st, None if caches is None else next(iter(caches[0].values())).views[0]

        for _ in range(3):
            run()
        ws.lock()
        st, witness = run()
        assert witness is not None
        watched = [witness, torch.Tensor, st, None]

        def runs() -> None:
            for _ in range(1000):
                run()

        assert_counts_flat(watched, runs)


def test_a_compiled_torch_release_reads_the_witness_address_its_row_noted() -> None:
    """A quick torch replay's release compares the view's data_ptr() with the one the
    remembered tensor's step row noted (``_step_rows.h``, ``step_row_tensor_data``): one
    data_ptr() call per release, the view's, where the Python path also calls the
    witness's (counted by a torch function mode). Both release the view alike."""
    from torch.overrides import TorchFunctionMode

    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    need_step_rows()
    seen: list[int] = []

    class Counted(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if getattr(func, "__name__", "") == "data_ptr":
                seen.append(id(args[0]))
            return func(*args, **(kwargs or {}))

    calls: list[list[bool]] = []

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        if run < 4:
            st.release(view)
            return
        seen.clear()
        with Counted():
            st.release(view)
        calls.append([i == id(view) for i in seen])
        assert sorted(st.run.released) == [0]

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "noted", body)
    assert calls == [[True]]


def _refused(st: Any, view: Any) -> list[int]:
    """Release ``view`` expecting a refusal; the run's released blocks after it."""
    with pytest.raises(ArenaError, match="not handed out"):
        st.release(view)
    return sorted(st.run.released)


def test_a_release_calls_a_data_ptr_set_on_the_tensor(hit_path: str) -> None:
    """A ``data_ptr`` set on the handed-out tensor itself shadows the method, for a
    release as for any caller: one that names other memory is refused on both paths. The
    compiled release calls torch's method directly only where the tensor has no instance
    attribute (``call_data_ptr`` in ``_region_hit.c``); slip: that check left out (the real
    address would release it)."""
    outcomes: list[list[int]] = []

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        if run < 4:
            st.release(view)
            return
        view.data_ptr = lambda: 8
        outcomes.append(_refused(st, view))

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "shadowed", body)
    assert outcomes == [[]]


def _identity(tensor: Any) -> int:
    """A data_ptr() that tells every tensor apart."""
    return id(tensor)


def test_a_release_calls_a_data_ptr_patched_on_the_class(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch.Tensor.data_ptr`` replaced after the compiled release found torch's method
    (once per type and version tag): the release calls the replacement, as the Python
    path does (here one that tells every tensor apart, so the view is refused). Slip: the
    method found once and kept past the type's change."""
    outcomes: list[list[int]] = []

    def body(st: Any, run: int) -> None:
        (view,) = st.get_simultaneous(((16,), F32))
        (other,) = st.get_simultaneous(((16,), F32))
        st.release(other)  # compiled when locked: the method found, the type's tag noted
        if run < 4:
            st.release(view)
            return
        monkeypatch.setattr(torch.Tensor, "data_ptr", _identity)
        # twice: the first lookup after the change gives the type its next tag
        outcomes.extend(_refused(st, view) for _ in range(2))
        monkeypatch.undo()

    with Arena("cpu", framework="torch") as ws:
        _locked_runs(ws, "patched", body)
    assert outcomes == [[1], [1]]
