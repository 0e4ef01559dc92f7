"""Steps: what the mutation run of the planning package found no test for.

Each test names the mutants it kills (``scripts/mutation planning``): the LOAD a step's
runs count, poisoning and debug retirement of released views, release()'s and the
divergence's messages, a step object entered again, remembered views per key and per
plan, lane merging, and the call sites of replayed requests. The numbers are mutmut's
for the sources of commit 0a34156 (docs/testing.md lists the run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError, ArenaLockedError, SpecError
from tests.stepping import F32, layer, ptr

KIB = ((256,), F32)  # one KiB
#: x + h + y of stepping.layer(ws, 100), live at once: its LOAD.
LAYER_100_LOAD = 25600 + 102400 + 25600


def load(ws: Arena) -> int:
    return ws.stats().slots[0].load


# --------------------------------------------------------------------- LOAD and live bytes
def test_a_recording_run_counts_its_live_bytes_and_gives_them_back() -> None:
    """The first (recording) run raises LOAD to its live peak, and its end gives every
    byte back: a scope after it counts from zero. (Step._checked #142 #143 #145 #146
    #150, Step.release #78 #81 #82.)"""
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 100)
        assert load(ws) == LAYER_100_LOAD
        with ws.scope() as s:
            s.get_simultaneous(((102_400,), F32))
        assert load(ws) == 409_600  # the scope alone: nothing left counted live


def test_a_recording_run_inside_a_scope_gives_back_exactly_what_it_held() -> None:
    """A step's views count while it runs and leave at its end, to the scope below it
    (Step._checked #142 #143, Step.release #78 #81 #82)."""
    with Arena("cpu", framework="numpy") as ws, ws.scope() as outer:
        outer.get_simultaneous(KIB)
        layer(ws, 100)  # records: x, h, y live at once; h released; z
        assert load(ws) == 1024 + LAYER_100_LOAD
        with ws.scope() as s:
            s.get_simultaneous(((102_400,), F32))
        assert load(ws) == 1024 + 409_600


def test_a_replay_inside_a_scope_counts_above_the_scopes_bytes() -> None:
    """A replay adds its plan's LOAD to what is live already (Step.__enter__ #56)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            with ws.scope() as s:
                s.get_simultaneous(((10_240,), F32))
                layer(ws, 100)
        assert load(ws) == 40_960 + LAYER_100_LOAD


def test_a_divergence_counts_the_views_still_live_above_the_scopes_bytes() -> None:
    """A replay that diverges counts its live blocks instead of the plan's LOAD, on top
    of the bytes outside the step (Step._diverge #35 #36)."""
    with Arena("cpu", framework="numpy") as ws:

        def run(big: bool) -> None:
            with ws.scope() as s:
                s.get_simultaneous(((1024,), F32))  # 4 KiB outside the step
                with ws.step("s") as st:
                    st.get_simultaneous(KIB)  # a: live to the end
                    st.get_simultaneous(((16_384,) if big else (256,), F32))

        run(False)
        run(False)  # plans: LOAD 2 KiB
        assert load(ws) == 4096 + 2048
        run(True)  # replays a, then diverges at request 1
        assert load(ws) == 4096 + 1024 + 65536


# ------------------------------------------------------------------ poisoning and debug
@pytest.mark.parametrize("runs", [1, 3], ids=["recording", "replay"])
def test_poisoning_fills_exactly_a_released_step_views_bytes(runs: int) -> None:
    """release() poisons the view's own bytes at once, recording or replaying, one view or
    several (Step.release #12 #13 #68 #69 #71 #72 #73 #74 #75 #84-#93)."""
    with Arena("cpu", framework="numpy", poison=True) as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(runs):
            with ws.scope() as s:
                s.get_simultaneous(KIB)  # the step starts above byte 0
                with ws.step("s") as st:
                    a, b, c = st.get_simultaneous(KIB, KIB, KIB)
                    (d,) = st.get_simultaneous(KIB)
                    for view in (a, b, c, d):
                        view[:] = 1.0
                    st.release(b)  # one view, between two live ones
                    assert np.isnan(b).all()
                    assert (a == 1.0).all() and (c == 1.0).all()
                    st.release(c, d)
                    assert np.isnan(c).all() and np.isnan(d).all()
                    assert (a == 1.0).all()


def test_debug_mode_retires_a_released_torch_view_and_the_runs_views_at_its_end() -> None:
    """Debug mode empties a released view at once and every view still live at the step's
    end (Step.release #94, Step.__exit__ #16 #17 #50, Step.__init__ #9)."""
    torch = pytest.importorskip("torch")
    with Arena("cpu", debug=True) as ws:
        for _ in range(3):  # record, plan, replay
            with ws.torch.step("s") as st:
                a, b = st.get_simultaneous(((4,), torch.float32), ((4,), torch.float32))
                (c,) = st.get_simultaneous(((4,), torch.float32))
                st.release(a)
                assert a.numel() == 0 and b.numel() == 4
                st.release(b, c)
                assert b.numel() == 0 and c.numel() == 0
                (d,) = st.get_simultaneous(((4,), torch.float32))
                assert d.numel() == 4
            assert d.numel() == 0  # live at the end: retired with the run


# ------------------------------------------------------------------------------ messages
def test_release_names_what_it_refused() -> None:
    """(Step.release #3 #25 #46 #47 #49 #52 #53 #54 #55.)"""
    with Arena("cpu", framework="numpy") as ws:
        step = ws.step("s")
        with pytest.raises(ArenaError, match=r"step 's' is not running: release inside"):
            step.release(np.zeros(4, F32))
        for _ in range(3):  # record, plan, replay
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(KIB)
                with pytest.raises(ArenaError, match=r"got object \(not handed out by this run\)"):
                    st.release(object())
                with pytest.raises(ArenaError, match=r"got ndarray of shape \(64,\) \(not handed"):
                    st.release(np.zeros(64, F32))
                st.release(a)
                with pytest.raises(
                    ArenaError, match=r"ndarray of shape \(256,\) \(released already\)"
                ):
                    st.release(a)  # the single-view path of a replay, twice


def test_an_unhashable_step_key_is_named_with_its_type() -> None:
    """(Step.__init__ #3.)"""
    with Arena("cpu", framework="numpy") as ws, pytest.raises(SpecError, match=r"\(list\)"):
        ws.step(["a"])  # type: ignore[arg-type]


def divergence(ws: Arena, *requests: Any) -> ArenaLockedError:
    with pytest.raises(ArenaLockedError) as info, ws.step("s") as st:
        for specs in requests:
            st.get_simultaneous(*specs)
    return info.value


def test_each_reason_of_a_divergence_is_named_exactly() -> None:
    """(Step._diverge #6 #9 #11 #12 #13 #15 #20 #21 #23 #24.)"""
    big = ((1024,), F32)  # 4096 bytes
    small = ((16,), F32)  # 64 bytes: one 256-byte block
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):
            with ws.step("s") as st:
                st.get_simultaneous(big)
                st.get_simultaneous(small, small)
        ws.lock()
        error = divergence(ws, [big], [small])
        assert "the plan's request 1 has 2 views, this one 1" in str(error)
        assert error.slot == (0, 0) and error.key == "s"
        assert error.caller is not None and "test_planning_gaps.py:" in error.caller
        error = divergence(ws, [big], [small, ((128,), F32)])  # 512 > 256
        assert "its views need [256, 512] bytes, the plan holds [256, 256]" in str(error)
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(KIB)
                st.release(a)
                st.get_simultaneous(KIB)
        ws.lock()
        error = divergence(ws, [KIB], [KIB])
        assert "(a view is kept past its planned last use (release it earlier))" in str(error)


def test_a_request_that_cannot_grow_a_locked_slot_names_the_step_and_request() -> None:
    """(Step._checked #97 #102.)"""
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 4)
        ws.lock()
        with pytest.raises(ArenaLockedError, match=r"step 'new' request 1"), ws.step("new") as st:
            st.get_simultaneous(KIB)
            st.get_simultaneous(((1 << 20,), F32))


def test_a_request_under_a_nested_step_inside_a_scope_names_the_nested_step() -> None:
    """With a scope below the outer step, the region on top is still the inner step
    (Step._checked #5)."""
    with Arena("cpu", framework="numpy") as ws, ws.scope(), ws.step("outer") as outer:
        outer.get_simultaneous(KIB)
        with ws.step("inner"), pytest.raises(ArenaError, match=r"step 'inner', opened inside"):
            outer.get_simultaneous(KIB)


def test_a_replayed_request_under_an_open_scope_is_refused_on_the_remembered_path() -> None:
    """The replay's hit serves only while the step is the innermost region
    (Step.get_simultaneous #9)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(3):  # record, plan, replay (remembers its views)
            with ws.step("s") as st:
                st.get_simultaneous(KIB)
        with (
            ws.step("s") as st,
            ws.scope(),
            pytest.raises(ArenaError, match="a scope opened inside step 's'"),
        ):
            st.get_simultaneous(KIB)


# ------------------------------------------------------------------ runs, plans, memory
def test_a_step_object_entered_again_starts_a_fresh_run() -> None:
    """Each entry of one Step object is a run of its own: what an earlier run released
    does not count as released in the next (Step.__enter__ #20 #21, Step.__exit__ #39)."""
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 10)
        layer(ws, 10)
        ws.lock()
        st = ws.step("layer")

        def run(release: bool) -> None:
            with st:
                st.get_simultaneous(((10, 64), F32))
                (h,) = st.get_simultaneous(((10, 256), F32))
                st.get_simultaneous(((10, 64), F32))
                if release:
                    st.release(h)
                st.get_simultaneous(((10, 64), F32))

        run(True)
        run(True)
        with pytest.raises(ArenaLockedError, match="kept past its planned last use"):
            run(False)  # h not released in this run


def test_two_keys_with_the_same_requests_replay_their_own_plans() -> None:
    """Remembered views are kept per step key: 'kept' holds a across b, 'freed' puts b on
    a's bytes (Step.__enter__ #59)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)

        def run(key: str) -> tuple[int, int]:
            with ws.step(key) as st:
                (a,) = st.get_simultaneous(KIB)
                if key == "freed":
                    st.release(a)
                (b,) = st.get_simultaneous(KIB)
                return ptr(ws, a), ptr(ws, b)

        for _ in range(4):  # record, plan, replay twice (remembered views)
            a, b = run("kept")
            assert b == a + 1024
            a, b = run("freed")
            assert b == a


def test_a_new_plan_is_never_served_from_the_views_remembered_for_the_old_one() -> None:
    """A key planned again gets a new version: its replays do not hand out the views of
    the old plan at the old offsets (StepBook.make_plan #59)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)

        def run(keep: bool) -> tuple[int, int]:
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(KIB)
                if not keep:
                    st.release(a)
                (b,) = st.get_simultaneous(KIB)
                if keep:
                    st.get_simultaneous(KIB)  # a third request: another structure
                return ptr(ws, a), ptr(ws, b)

        for _ in range(3):
            a, b = run(False)
            assert b == a
        run(True)  # diverges (a kept past its planned life): records again
        for _ in range(3):  # plans, replays, replays from remembered views
            a, b = run(True)
            assert b == a + 1024


def test_a_step_that_makes_no_request_plans_and_replays() -> None:
    """A step with no request records, plans (to nothing) and replays, locked too."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("empty"):
                pass
        ws.lock()
        with ws.step("empty"):
            pass
        assert ws.plan_steps() == {"empty": 0}


def test_first_fit_takes_a_gap_of_exactly_the_size_asked() -> None:
    """(StepRun.first_fit #5.)"""
    with Arena("cpu", framework="numpy") as ws, ws.step("s") as st:
        a, b, c = st.get_simultaneous(KIB, KIB, KIB)
        st.release(b)
        (d,) = st.get_simultaneous(KIB)
        assert ptr(ws, d) == ptr(ws, b)
        assert ptr(ws, a) < ptr(ws, d) < ptr(ws, c)


def test_a_replay_diverging_on_one_size_keeps_the_largest_sizes_of_the_others() -> None:
    """A run recorded again with the same requests and lives merges its sizes with the
    record by maximum: the plan still holds the larger later view it did not see this time
    (StepBook.record #4-#9)."""
    with Arena("cpu", framework="numpy") as ws:

        def run(first: int, second: int) -> None:
            with ws.step("s") as st:
                st.get_simultaneous(((first,), F32))
                st.get_simultaneous(((second,), F32))

        run(256, 4096)
        run(256, 4096)  # plans
        run(1024, 256)  # diverges at request 0 (larger); request 1 smaller than planned
        run(1024, 256)  # plans the merged record
        ws.lock()
        run(1024, 4096)  # both at their largest: fits the plan


# ------------------------------------------------------------------------ lanes
def test_lock_merges_the_largest_sizes_of_plans_at_the_same_offsets() -> None:
    """Siblings whose plans put two short-lived views at the same offsets still merge to
    the larger size of each (records._merged #16)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def run(ubatch: int, first: int, second: int) -> None:
            with ws.ubatch(ubatch), ws.step("s") as st:
                (a,) = st.get_simultaneous(((first,), F32))
                st.release(a)
                st.get_simultaneous(((second,), F32))  # on a's bytes

        for _ in range(2):
            run(0, 4096, 64)
            run(1, 64, 4096)
        ws.lock()
        for ubatch in (0, 1):
            run(ubatch, 4096, 4096)  # what either ubatch saw: fits its plan


def test_lock_sizes_every_sibling_for_the_merged_plan_and_planned_bytes_says_so() -> None:
    """A merged plan larger than every sibling's own is a top-level key's: lock() sizes
    the lane for it (records._merged #27, StepBook.take_plan #34), and planned_bytes()
    predicts it (records.share_plans #1)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def run(ubatch: int, first: int, second: int) -> None:
            with ws.ubatch(ubatch), ws.step("s") as st:
                st.get_simultaneous(((first,), F32))
                st.get_simultaneous(((second,), F32))  # both live to the end

        for _ in range(2):
            run(0, 4096, 64)
            run(1, 64, 4096)
        planned = ws.planned_bytes()
        ws.lock()
        assert planned == ws.memory_stats()["reserved_bytes.all.current"]
        assert [slot.capacity for slot in ws.stats().slots] == [(4096 + 4096) * 4] * 2
        for ubatch in (0, 1):
            run(ubatch, 4096, 4096)


def test_lock_while_a_step_runs_lets_a_sibling_run_the_key() -> None:
    """A copy of a running book for a micro-batch that never ran the key is not running
    (StepBook.copy #1 #17)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        layer(ws, 8)
        with ws.step("layer") as st:
            st.get_simultaneous(((8, 64), F32))
            ws.lock()
            with ws.ubatch(1):
                assert len(layer(ws, 8)) == 4


def test_a_replayed_request_from_a_new_line_is_a_call_site() -> None:
    """While unlocked, a replay served from remembered views still notes its call site
    (Step._served #1, Step.__enter__ #28 #31 #32)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(3):  # record, plan, replay (remembers its views)
            with ws.step("s") as st:
                st.get_simultaneous(KIB)
        before = set(ws.stats().call_sites)
        with ws.step("s") as st:
            st.get_simultaneous(KIB)  # the remembered views, from this line
        new = set(ws.stats().call_sites) - before
        assert [site.split(":")[0] for site in new] == ["test_planning_gaps.py"]


def test_stored_plans_leave_out_keys_json_cannot_give_back() -> None:
    """(records.stored_plans #3.)"""
    from arena.planning.plan import make_plan
    from arena.planning.records import StepBook, stored_plans

    planned = StepBook()
    planned.counts, planned.sizes, planned.firsts, planned.lasts = [1], [256], [0], [0]
    planned.runs = 1
    make_plan(planned, 256)
    entries = stored_plans({("a", 1): planned, "b": planned, 3: StepBook()})
    assert [entry["key"] for entry in entries] == ["b"]


# ------------------------------------------------------------------------------ scopes
def test_a_scope_closed_out_of_order_keeps_the_bytes_of_the_scope_still_open() -> None:
    """(scopes.close_region #3 #6 #8 #9 #10.)"""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        outer, inner = ws.scope(), ws.scope()
        with outer:
            outer.get_simultaneous(KIB)
            inner.__enter__()
            (b,) = inner.get_simultaneous(KIB)
        # outer closed first: inner is still open and holds b
        with ws.scope() as later:
            (d,) = later.get_simultaneous(KIB)
            assert ptr(ws, d) >= ptr(ws, b) + 1024
        inner.__exit__(None, None, None)


def test_scopes_count_their_live_bytes_exactly() -> None:
    """Every request of a scope counts, and its exit gives back exactly what it held, to
    the scope still open below it (scopes.open_region #4, Scope.get_simultaneous #30)."""
    with Arena("cpu", framework="numpy") as ws, ws.scope() as outer:
        outer.get_simultaneous(KIB)
        with ws.scope() as s:
            s.get_simultaneous(KIB)
            s.get_simultaneous(KIB)
        assert load(ws) == 3072
        with ws.scope() as s:
            for _ in range(3):
                s.get_simultaneous(KIB)
        assert load(ws) == 4096


def test_a_scope_views_bytes_are_left_alone_at_its_exit_without_poisoning() -> None:
    """(Scope.__exit__ #5.)"""
    with Arena("cpu", framework="numpy") as ws:
        with ws.scope() as s:
            (kept,) = s.get_simultaneous(((16,), F32))
            kept[:] = 1.0
        assert (kept == 1.0).all()


def test_a_scope_places_views_at_the_arenas_alignment() -> None:
    """(Scope.get_simultaneous #10.)"""
    with Arena("cpu", framework="numpy", alignment=1024) as ws, ws.scope() as s:
        a, b = s.get_simultaneous(((16,), F32), ((16,), F32))
        assert ptr(ws, b) - ptr(ws, a) == 1024


def test_planning_keeps_the_bytes_a_scope_reached() -> None:
    """A scope's top counts as a plain request's: planning steps never shrinks the slot
    below it (Scope.get_simultaneous #35 #38)."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.scope() as s:
            s.get_simultaneous(((16_384,), F32))  # 64 KiB
        layer(ws, 4)
        layer(ws, 4)  # plans, and fits the slot to what it needs
        assert ws.stats().slots[0].capacity == 65536


def test_a_scope_request_refused_while_locked_says_so() -> None:
    """(Scope.get_simultaneous #25, Scope.__enter__ #3.)"""
    with Arena("cpu", framework="numpy") as ws:
        ws.lock()
        with pytest.raises(ArenaLockedError, match=r"\bscope request\b"), ws.scope() as s:
            s.get_simultaneous(KIB)
        scope = ws.scope()
        with scope, pytest.raises(ArenaError, match=r"^this scope is already open; make a new"):
            scope.__enter__()


# --------------------------------------------------------------------- stored step entries
def entry(**changes: Any) -> dict[str, Any]:
    """A valid stored entry: two blocks of 512 bytes, both live at request 1."""
    fields: dict[str, Any] = {
        "key": "s",
        "counts": [1, 1],
        "sizes": [512, 512],
        "lasts": [1, 1],
        "offsets": [0, 512],
        "total": 1024,
        "base": 0,
        "above": 0,
        "top_level": True,
        "recorded_at": 0,
    }
    fields.update(changes)
    return fields


def test_a_stored_entry_whose_blocks_overlap_a_lower_neighbour_is_refused() -> None:
    """(profilesteps._placement_problem #39 #40.)"""
    from arena.observe.profilesteps import step_problem

    assert step_problem(entry(), 256, 1 << 20) is None
    problem = step_problem(entry(offsets=[0, 256]), 256, 1 << 20)
    assert problem == (
        "blocks #0 and #1 are live at request 1 and share bytes (0..512 and 256..768)"
    )


def test_a_zero_byte_block_does_not_end_the_check_of_its_request() -> None:
    """(profilesteps._placement_problem #33.)"""
    from arena.observe.profilesteps import step_problem

    bad = entry(counts=[3], sizes=[0, 512, 512], lasts=[0, 0, 0], offsets=[0, 0, 256])
    assert step_problem(bad, 256, 1 << 20) == (
        "blocks #1 and #2 are live at request 0 and share bytes (0..512 and 256..768)"
    )


def test_a_stored_entry_may_reach_exactly_the_limit() -> None:
    """(profilesteps.step_problem #34.)"""
    from arena.observe.profilesteps import step_problem

    assert step_problem(entry(base=1024, above=2048), 256, 4096) is None
    assert step_problem(entry(base=1024, above=2304), 256, 4096) == (
        "'base' + 'total' + 'above' must be at most 2**63 - 1"
    )


def test_a_bad_list_is_shown_in_the_message_cut_to_sixty_characters() -> None:
    """(profilesteps._lists #5, _show #3 #4 #6-#11.)"""
    from arena.observe.profilesteps import step_problem

    exact = "x" * 58  # its repr is 60 characters: shown whole
    assert step_problem(entry(sizes=exact), 256, 1 << 20) == (
        f"'sizes' must be a list, found {exact!r}"
    )
    longer = "x" * 59
    assert step_problem(entry(sizes=longer), 256, 1 << 20) == (
        f"'sizes' must be a list, found {repr(longer)[:57]}..."
    )
    nested: Any = 1
    for _ in range(100_000):
        nested = {"a": nested}
    assert step_problem(entry(sizes=nested), 256, 1 << 20) == (
        "'sizes' must be a list, found <deeply nested dict>"
    )


def test_an_empty_request_places_nothing() -> None:
    """A request of no views in a recording run leaves the step's end where it was: a
    plain request after it lands where the step's next view does (Step._checked #76 #78
    #87)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        with ws.step("s") as st:
            assert st.get_simultaneous() == []
            (plain,) = ws.get_simultaneous(KIB)  # above the step's (empty) end
            (a,) = st.get_simultaneous(KIB)  # valid until the next request: a reuses it
            assert ptr(ws, a) == ptr(ws, plain)


def test_planning_keeps_the_most_any_replay_needed_above_the_step() -> None:
    """What a key's replays need above their plan is the largest any of them needed, not
    the last one's (StepBook.ran #12 #21, Step.__exit__ #29)."""
    with Arena("cpu", framework="numpy") as ws:

        def run(plain: int) -> None:
            with ws.step("s") as st:
                st.get_simultaneous(KIB)
                ws.get_simultaneous(((plain,), F32))  # above the step's plan

        run(256)
        run(256)  # plans
        run(16_384)  # a replay needs 64 KiB above the plan
        run(256)
        run(256)
        ws.plan_steps()  # sizes the slot to what its steps need
        assert ws.stats().slots[0].capacity >= 1024 + 65536


# ------------------------------------------------------------------ plan_offsets' input
@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ("ab", "tuples, got str; pass e.g. [(4096, 0, 2), (1024, 1, 3)]"),
        (5, "tuples, got 5 (int); pass e.g. [(4096, 0, 2), (1024, 1, 3)]"),
        (
            [("x", 0, 1)],
            "block 0: nbytes must be an int, got 'x' (str); pass the block's size in bytes",
        ),
        (
            [(256, -1, 1)],
            "block 0: first must be >= 0, got -1; pass the index of the block's first use",
        ),
        (
            [(256, 0, 1.5)],
            "block 0: last must be an int, got 1.5 (float); pass the index of the block's last use",
        ),
        ([(512, 3, 1)], "inclusive index range first..last, e.g. (512, 1, 3)"),
    ],
)
def test_plan_offsets_names_the_bad_field_and_the_fix(blocks: Any, message: str) -> None:
    """(offsets._validate #2 #6 #29 #34 #36 #37 #41 #42 #47-#50 #54 #55 #60 #61 #66.)"""
    from arena.planning import plan_offsets

    with pytest.raises(SpecError) as info:
        plan_offsets(blocks)
    assert str(info.value).endswith(message)


def test_a_running_step_object_entered_again_is_refused_by_name() -> None:
    """(Step.__enter__ #2.)"""
    with Arena("cpu", framework="numpy") as ws:
        st = ws.step("s")
        with st, pytest.raises(ArenaError, match=r"step 's' is already running; make a new"):
            st.__enter__()


def test_lock_shares_the_keys_after_one_no_micro_batch_completed() -> None:
    """A key whose every run was interrupted has no plan to share; the keys after it are
    still merged (records.share_plans #12)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def run(ubatch: int, key: str, size: int) -> None:
            with ws.ubatch(ubatch), ws.step(key) as st:
                st.get_simultaneous(((size,), F32))
                if key == "broken":
                    raise KeyError(key)

        with pytest.raises(KeyError):
            run(0, "broken", 64)
        for _ in range(2):
            run(0, "s", 64)
            run(1, "s", 4096)
        ws.lock()
        run(0, "s", 4096)  # ubatch 1's size: in the merged plan


def test_a_divergence_names_the_micro_batch_of_its_slot() -> None:
    """(Step._diverge #24.)"""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(1):
            layer(ws, 10)
            layer(ws, 10)
        ws.lock()
        with ws.ubatch(1), pytest.raises(ArenaLockedError) as info:
            layer(ws, 20)
        assert info.value.slot == (1, 0)


def test_a_record_with_other_lifetimes_replaces_the_old_one() -> None:
    """A run recorded again with the same requests but a view kept longer keeps the new
    lifetimes: the next plan does not put the later view on the kept one's bytes
    (StepBook.record #5 #6)."""
    with Arena("cpu", framework="numpy") as ws:

        def run(keep: bool) -> None:
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(KIB)
                if not keep:
                    st.release(a)
                st.get_simultaneous(KIB)

        run(False)
        run(False)  # plans: b on a's bytes
        run(True)  # a kept past its planned life: diverges, records again
        run(True)  # plans the new lifetimes
        ws.lock()
        run(True)


def test_a_plan_found_by_the_first_order_made_no_moves() -> None:
    """Two blocks live together: ordering by size meets the lower bound at once, so no
    other order and no local-search move is tried (offsets.plan_offsets #105)."""
    from arena.planning import plan_offsets

    plan = plan_offsets([(256, 0, 1), (512, 1, 2)])
    assert (plan.total_bytes, plan.lower_bound) == (768, 768)
    assert (plan.strategy, plan.moves) == ("size", 0)


def test_a_step_plan_packs_blocks_at_the_arenas_alignment() -> None:
    """Blocks of an arena aligned below plan_offsets' default are planned at the arena's
    alignment, not rounded up to 256 bytes, also when a run recorded again with larger
    views leaves no first fit to keep (StepBook.make_plan #16)."""
    with Arena("cpu", framework="numpy", alignment=64) as ws:

        def run(floats: int) -> None:
            with ws.step("s") as st:
                st.get_simultaneous(((floats,), F32))
                st.get_simultaneous(((floats,), F32))

        run(16)
        run(16)
        assert ws.plan_steps() == {"s": 128}
        run(32)  # larger: diverges, records again (sizes merged, no first fit kept)
        run(32)  # plans
        assert ws.plan_steps() == {"s": 256}
