"""Steps: the first run records, the second plans, later runs replay the plan's pointers;
divergence re-records while unlocked and is refused, by name, while locked or capturing."""

from __future__ import annotations

import numpy as np
import pytest

from arena import Arena, ArenaError, ArenaLockedError, GraphCaptureError, SpecError
from tests import stepping
from tests.sources import RecordingSource
from tests.stepping import F32, layer, ptr

KIB = ((256,), F32)  # one KiB


def test_second_run_plans_and_later_runs_repeat_its_pointers_through_lock(hit_path: str) -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as ws:
        layer(ws, 100)  # records
        second = layer(ws, 100)  # plans
        assert layer(ws, 100) == second
        ws.lock()
        before = len(source.events)
        assert layer(ws, 100) == second
        assert layer(ws, 37) == second  # fewer tokens: the same planned offsets
        assert len(source.events) == before  # replays after lock allocate nothing
        stats = ws.stats().slots[0]
        # x + h + y live at once: LOAD = 25600 + 102400 + 25600, and the plan meets it.
        assert stats.load == 153600 and stats.capacity == 153600


def test_the_plan_reuses_released_bytes_and_warm_up_never_grows_to_the_sum() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(153600)  # LOAD: the first run must fit in it, never the sum
        _, h, _, z = layer(ws, 100)
        assert z == h  # first fit: z takes the bytes h was released from
        assert ws.stats().slots[0].capacity == 153600 < 25600 * 3 + 102400
        _, h, _, z = layer(ws, 100)
        assert z == h


def test_plan_uses_the_largest_bytes_seen_per_request() -> None:
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 64)
        layer(ws, 128)  # diverges (larger): records again, unlocked
        planned = layer(ws, 128)
        assert layer(ws, 64) == planned  # smaller tokens fit the plan: same pointers
        assert ws.plan_steps() == {"layer": 128 * 64 * 4 * 2 + 128 * 256 * 4}


def test_divergence_while_locked_names_the_key_the_request_and_the_call_site(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 100)
        layer(ws, 100)
        ws.lock()
        with pytest.raises(ArenaLockedError) as info:
            layer(ws, 200)
        message = str(info.value)
        assert (
            "step 'layer' request 0" in message and "stepping.py:" in message
        )  # where layer() asked
        assert info.value.key == "layer"
        with (
            pytest.raises(ArenaLockedError, match="the plan has 4 requests"),
            ws.step("layer") as st,
        ):
            st.get_simultaneous(((100, 64), F32))
            (h,) = st.get_simultaneous(((100, 256), F32))
            st.get_simultaneous(((100, 64), F32))
            st.release(h)
            st.get_simultaneous(((100, 64), F32))
            st.get_simultaneous(((100, 64), F32))  # a fifth request


def test_a_view_kept_past_its_planned_life_is_a_divergence(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 10)
        layer(ws, 10)
        ws.lock()
        with (
            pytest.raises(ArenaLockedError, match="kept past its planned last use"),
            ws.step("layer") as st,
        ):
            st.get_simultaneous(((10, 64), F32))
            st.get_simultaneous(((10, 256), F32))
            st.get_simultaneous(((10, 64), F32))
            st.get_simultaneous(((10, 64), F32))  # h was never released


def test_divergence_unlocked_records_again_and_keeps_live_views_intact(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        layer(ws, 10)
        layer(ws, 10)
        with ws.step("layer") as st:
            (x,) = st.get_simultaneous(((10, 64), F32))
            x[:] = 7
            (big,) = st.get_simultaneous(((10, 4096), F32))  # larger than planned
            big[:] = 8
            assert np.all(x == 7)
            assert ptr(ws, big) >= ptr(ws, x) + x.nbytes or ptr(ws, big) + big.nbytes <= ptr(ws, x)
        layer(ws, 10)  # new structure recorded last run: this run plans again
        assert layer(ws, 10) == layer(ws, 10)


def test_a_replay_that_diverges_after_a_release_keeps_the_released_views_life(
    hit_path: str,
) -> None:
    """A replay releases one view (the single-view path) and two at once, then diverges:
    the run recorded from there keeps the lives those releases ended, so the next plan
    puts the later request on the released bytes."""
    with Arena("cpu", framework="numpy") as ws:

        def run(extra: bool) -> list[int]:
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(((256,), F32))
                b, c = st.get_simultaneous(((256,), F32), ((256,), F32))
                (d,) = st.get_simultaneous(((256,), F32))
                st.release(a)
                st.release(b, c)
                (e,) = st.get_simultaneous(((768,), F32))  # fits where a, b and c were
                if extra:
                    st.get_simultaneous(((4096,), F32))  # diverges from the plan
                return [ptr(ws, v) for v in (a, d, e)]

        run(False)
        planned = run(False)
        assert planned[2] == planned[0]
        run(True)  # replays, releases, then diverges: recorded from the plan onwards
        replanned = run(True)  # plans the new record
        assert run(True) == replanned
        # a, b and c died before e and the extra view were made: at most d, e and the
        # extra view are live at once, and the plan needs no more than that.
        stats = ws.stats().slots[0]
        assert stats.load == (256 + 768 + 4096) * 4
        assert stats.capacity == stats.load


def test_steps_during_capture_need_a_plan_and_refuse_divergence(hit_path: str) -> None:
    capturing = [False]
    with Arena("cpu", framework="numpy", capture_probe=lambda: capturing[0]) as ws:
        layer(ws, 10)
        layer(ws, 10)
        capturing[0] = True
        with pytest.raises(GraphCaptureError, match="first time"), ws.step("never-run"):
            pass
        assert layer(ws, 10)  # replay under capture: fine
        with pytest.raises(GraphCaptureError, match="step 'layer' request 0"):
            layer(ws, 20)
        capturing[0] = False


def test_planning_shrinks_a_slot_larger_than_its_plans_need() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as ws:
        with ws.step("s") as st:  # record: a first-fit order that wastes bytes
            (a,) = st.get_simultaneous(((100,), F32))
            (b,) = st.get_simultaneous(((1000,), F32))
            st.release(a)
            st.get_simultaneous(((200,), F32))
            st.release(b)
            st.get_simultaneous(((1000,), F32))
        recorded = ws.stats().slots[0].capacity
        planned = ws.plan_steps()["s"]
        capacity = ws.stats().slots[0].capacity
        assert capacity == planned < recorded
        assert source.events[-2:] == [("release", recorded), ("allocate", planned)]


def test_bad_use_is_named(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(SpecError, match="not hashable"):
            ws.step(["layer"])
        step = ws.step("k")
        with pytest.raises(ArenaError, match="not running"):
            step.get_simultaneous(((4,), F32))
        with step as st:
            (v,) = st.get_simultaneous(((4,), F32))
            st.release(v)
            with pytest.raises(ArenaError, match="released yet"):
                st.release(v)
            with pytest.raises(ArenaError, match="released yet"):
                st.release(np.zeros(4))
            with ws.scope() as s, pytest.raises(ArenaError, match="scope opened inside"):
                st.get_simultaneous(((4,), F32))
            del s


def test_an_interrupted_first_run_is_not_recorded() -> None:
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(KeyboardInterrupt), ws.step("k") as st:
            st.get_simultaneous(((4,), F32))
            raise KeyboardInterrupt
        with ws.step("k") as st:  # still recording: nothing was planned from half a run
            st.get_simultaneous(((4,), F32))
            st.get_simultaneous(((8,), F32))
        assert ws.plan_steps() == {"k": 512}


def test_planning_never_shrinks_a_slot_below_a_plain_request_that_grew_it() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((1 << 18,), F32))  # 1 MB: grows the slot
        assert ws.stats().slots[0].load == 1 << 20
        layer(ws, 10)
        layer(ws, 10)
        ws.plan_steps()
        assert ws.stats().slots[0].capacity == 1 << 20
        ws.lock()
        ws.get_simultaneous(((1 << 18,), F32))  # warmed up before lock(): served


def test_a_replayed_request_counts_and_remembers_like_the_checked_path(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            layer(ws, 8)
        ws.lock()
        before = ws.stats().calls
        with ws.step("layer") as st:
            st.get_simultaneous(((8, 64), F32))
            (h,) = st.get_simultaneous(((8, 256), F32))
            assert st.request == 2
            st.release(h)
            st.get_simultaneous(((8, 64), F32))
            st.get_simultaneous(((8, 64), F32))
            assert st.request == 4
        assert ws.stats().calls == before + 4
        # A float dimension is refused, not served as 8.
        with ws.step("layer") as st, pytest.raises(SpecError):
            st.get_simultaneous(((8.0, 64), F32))


def test_planning_never_shrinks_a_slot_below_what_reserve_asked_for() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        layer(ws, 4)
        layer(ws, 4)  # plans: the step needs far less than the reservation
        assert ws.stats().slots[0].capacity == 1 << 20
        ws.plan_steps()
        ws.lock()
        assert ws.try_get_simultaneous(((1 << 18,), F32)) is not None


def test_a_locked_replay_at_another_stack_height_warns_once() -> None:
    from arena import ArenaWarning

    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        layer(ws, 8)
        layer(ws, 8)
        ws.lock()
        layer(ws, 8)  # the same height: no warning (filterwarnings=error would raise)
        with ws.scope() as s:
            s.get_simultaneous(((64,), F32))
            with pytest.warns(ArenaWarning, match="starts at byte 256") as record:
                layer(ws, 8)
            assert record[0].filename == stepping.__file__  # layer()'s line
            layer(ws, 8)  # warned once per step and slot


def test_a_step_inside_a_run_of_the_same_key_is_refused_by_name() -> None:
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as outer:
                outer.get_simultaneous(((100,), F32))
                with pytest.raises(ArenaError, match="already running"), ws.step("k"):
                    pass
                with ws.step("inner") as inner:  # another key: fine
                    inner.get_simultaneous(((100,), F32))
                outer.get_simultaneous(((100,), F32))


def test_a_step_whose_entry_fails_leaves_nothing_open() -> None:
    """A warning raised as an error while entering (filterwarnings=error) must not leave
    the step marked running or its region open."""
    from arena import ArenaWarning

    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        layer(ws, 8)
        layer(ws, 8)
        ws.lock()
        with ws.scope() as s:
            s.get_simultaneous(((64,), F32))
            with pytest.raises(ArenaWarning, match="starts at byte 256"), ws.step("layer"):
                pass
            s.get_simultaneous(((64,), F32))  # the scope is innermost again
        layer(ws, 8)  # not "already running"


def test_debug_mode_on_a_cached_torch_front_never_hands_out_a_retired_view() -> None:
    """A cached front's step replay hands out the same objects every run: retiring them at
    the end of one run emptied the next run's views."""
    torch = pytest.importorskip("torch")
    with Arena("cpu", debug=True) as ws:
        front = ws.front("torch", cached=True)
        for _ in range(4):
            with front.step("s") as st:
                (a,) = st.get_simultaneous(((4,), torch.float32))
                assert a.shape == (4,)
                a.fill_(1.0)
            with front.scope() as sc:
                (b,) = sc.get_simultaneous(((4,), torch.float32))
                assert b.shape == (4,)
        ws.lock()
        with front.step("s") as st:
            (a,) = st.get_simultaneous(((4,), torch.float32))
            assert a.shape == (4,)


def test_release_of_several_views_is_all_or_nothing() -> None:
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            with ws.step("s") as st:
                a, b = st.get_simultaneous(((64,), F32), ((64,), F32))
                stranger = np.zeros(64, F32)
                with pytest.raises(ArenaError, match="nothing was released"):
                    st.release(a, stranger)
                with pytest.raises(ArenaError, match="released twice in this call"):
                    st.release(b, b)
                st.release(a, b)  # both still live: the failed calls released nothing
                with pytest.raises(ArenaError, match="released already"):
                    st.release(a)


def test_a_jax_view_written_by_write_into_is_released_by_its_new_array() -> None:
    jnp = pytest.importorskip("jax.numpy")
    with Arena("cpu", framework="jax") as ws:
        for _ in range(3):  # record, plan, replay
            with ws.step("s") as st:
                (a,) = st.get_simultaneous(((8,), "float32"))
                written = ws.jax.write_into(a, jnp.ones(8, "float32"))
                assert written is not a
                st.release(written)  # the view behind it ends its life
                (b,) = st.get_simultaneous(((8,), "float32"))
                assert ws.jax.data_ptr(b) == ws.jax.data_ptr(a)  # its bytes were reused
                with pytest.raises(ArenaError, match="released already"):
                    st.release(a)


def test_a_recorded_request_of_many_views_searches_for_room_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One first-fit search per request (a search per view made a request of n views cost
    O(n^2 log n) while recording); its views lie side by side in the gap found."""
    from arena.planning.records import StepRun

    searches: list[int] = []
    search = StepRun.first_fit

    def counted(run: StepRun, size: int) -> int:
        searches.append(size)
        return search(run, size)

    monkeypatch.setattr(StepRun, "first_fit", counted)
    with Arena("cpu", framework="numpy") as ws, ws.step("s") as st:
        views = st.get_simultaneous(*[((64,), F32)] * 500)
        assert searches == [500 * 256]
        addresses = [ptr(ws, v) for v in views]
        assert addresses == [addresses[0] + 256 * k for k in range(500)]


def test_a_stale_alias_of_a_released_view_does_not_release_the_view_now_at_its_bytes() -> None:
    """After a view is released and a later request of the same shape takes its bytes,
    releasing another array over those bytes must not end the later view's life (the
    next request would get its bytes while it is in use)."""
    with Arena("cpu", framework="numpy") as ws, ws.step("layer") as st:
        (h,) = st.get_simultaneous(KIB)
        alias = h[:]  # what write_into returns on JAX: another array over h's bytes
        st.release(h)
        (z,) = st.get_simultaneous(KIB)  # first fit: h's bytes
        assert ws.numpy.data_ptr(z) == ws.numpy.data_ptr(h)
        with pytest.raises(ArenaError, match="not handed out by this run"):
            st.release(alias)  # another array over z's bytes: it does not stand for z
        (w,) = st.get_simultaneous(KIB)
        assert ws.numpy.data_ptr(w) != ws.numpy.data_ptr(z)  # two live views, one KiB


def test_release_errors_name_what_was_given_and_the_fix(hit_path: str) -> None:
    """release() of the list get_simultaneous returned, or of a slice, says what to pass;
    the run goes on (nothing was released)."""
    with Arena("cpu", framework="numpy") as ws, ws.step("s") as st:
        views = st.get_simultaneous(KIB, KIB)
        with pytest.raises(ArenaError) as as_list:
            st.release(views)
        assert str(as_list.value) == (
            "release() takes views this run of step 's' handed out and has not released "
            "yet; got list (not handed out by this run); nothing was released; pass the "
            "views as separate arguments: release(*views)"
        )
        with pytest.raises(ArenaError) as as_slice:
            st.release(views[0][:2])
        assert str(as_slice.value).endswith(
            "got ndarray of shape (2,) (not handed out by this run); nothing was released; "
            "release the view itself, not a slice or an array made from it"
        )
        st.release(*views)
        with pytest.raises(ArenaError) as twice:
            st.release(views[0])
        assert str(twice.value).endswith("(released already); nothing was released")


def test_a_write_into_result_of_a_released_jax_view_is_released_already() -> None:
    jnp = pytest.importorskip("jax.numpy")
    with Arena("cpu", framework="jax") as ws, ws.step("layer") as st:
        (h,) = st.get_simultaneous(KIB)
        written = ws.jax.write_into(h, jnp.ones(256, jnp.float32))
        st.release(h)
        (z,) = st.get_simultaneous(KIB)  # first fit: h's bytes
        assert ws.jax.data_ptr(z) == ws.jax.data_ptr(written)
        with pytest.raises(ArenaError, match="released already"):
            st.release(written)  # stands for h, not for z
        st.release(z)


def test_lock_after_one_warm_up_run_sizes_a_plain_request_made_inside_a_nested_step() -> None:
    """lock() plans keys still recording and sizes the slot to their reach. A plain
    request inside a nested step lands, in a replay, above the inner step's whole plan,
    not above where the inner step's first fit had reached when the request came: the
    recorded estimate is short and the first locked run raises ArenaLockedError."""
    with Arena("cpu", framework="numpy") as ws:

        def run() -> None:
            with ws.step("outer") as outer:
                outer.get_simultaneous(KIB)
                with ws.step("inner") as inner:
                    inner.get_simultaneous(KIB)
                    ws.get_simultaneous(KIB)  # plain scratch, dead at the next request
                    inner.get_simultaneous(KIB)
                outer.get_simultaneous(KIB)

        run()  # one eager run: lock() plans both keys
        planned = ws.planned_bytes()
        ws.lock()
        assert ws.memory_stats()["reserved_bytes.all.current"] == planned
        run()  # was ArenaLockedError: 5120 bytes needed, lock() sized 4096 (and no warning)


def test_a_nested_step_replayed_after_lock_at_its_usual_height_does_not_warn() -> None:
    """A step nested in a step starts, in every replay, at the outer plan's end; its
    recording run started lower (where the outer's first fit had reached). The height
    check compares with the recording run's start, so every locked run of the nested
    step warns "Enter the step at the same stack height" though its pointers repeat;
    under warnings-as-errors every locked run raises."""
    with Arena("cpu", framework="numpy") as ws:

        def run() -> list[int]:
            with ws.step("outer") as outer:
                (a,) = outer.get_simultaneous(KIB)
                with ws.step("inner") as inner:
                    (b,) = inner.get_simultaneous(KIB)
                (c,) = outer.get_simultaneous(KIB)
                return [ws.numpy.data_ptr(v) for v in (a, b, c)]

        for _ in range(3):  # record, plan, replay: the slot is at its planned size
            warmed = run()
        ws.lock()
        assert run() == warmed  # the same pointers ... and an ArenaWarning, raised here


def test_release_by_a_write_into_result_survives_a_deleted_sibling_view() -> None:
    """A JAX view given away (deleted, or donated to a jitted function) makes release()
    of another view's write_into result raise JAX's own error: the address match reads
    every live view's pointer, the deleted one's too."""
    jnp = pytest.importorskip("jax.numpy")
    with Arena("cpu", framework="jax") as ws, ws.jax.step("layer") as st:
        first, second = st.get_simultaneous(((64,), F32), ((64,), F32))
        first.delete()  # donated
        written = ws.jax.write_into(second, jnp.ones(64, jnp.float32))
        st.release(written)  # JaxRuntimeError: UnsafeBufferPointer on a deleted buffer
        (again,) = st.get_simultaneous(((64,), F32))
        assert ws.jax.data_ptr(again) == ws.jax.data_ptr(written)


def test_a_step_request_under_a_nested_step_names_the_nested_step() -> None:
    """An outer step's request while a step opened inside it is open is refused, but the
    message blames "a scope opened inside step 'outer'" and suggests requesting "through
    the scope": there is no scope, and the inner step cannot take the outer's request."""
    with Arena("cpu", framework="numpy") as ws, ws.step("outer") as outer:
        outer.get_simultaneous(KIB)
        with ws.step("inner"):
            with pytest.raises(ArenaError) as info:
                outer.get_simultaneous(KIB)
            assert "'inner'" in str(info.value)


def test_a_step_key_not_equal_to_itself_is_refused() -> None:
    """A NaN key (float or NumPy) hashes but never equals itself: every run finds no book,
    makes a new one and records again. The step never plans, and the slot keeps one
    book per run (1,000 runs, 1,000 books) with no error; an unhashable key is refused
    with SpecError, this one could be too."""
    with Arena("cpu", framework="numpy") as ws, pytest.raises(SpecError):
        for _ in range(3):
            with ws.step(float("nan")) as st:
                st.get_simultaneous(((10,), F32))


def _run_inside(ws: Arena, outers: tuple[str, ...], large: bool) -> None:
    """Step "inner" inside the steps ``outers`` (outermost first), each of them asking for
    a KiB before and after the steps inside it; "inner" asks for 16 KiB (``large``) or,
    where its plan has that one request, for two small views: a divergence."""
    if outers:
        with ws.step(outers[0]) as outer:
            outer.get_simultaneous(KIB)
            _run_inside(ws, outers[1:], large)
            outer.get_simultaneous(KIB)
        return
    with ws.step("inner") as inner:
        if large:
            inner.get_simultaneous(((4096,), F32))
        else:  # two requests where the plan has one: a divergence
            inner.get_simultaneous(((64,), F32))
            inner.get_simultaneous(((64,), F32))


def test_an_inner_step_recorded_anew_has_the_outer_steps_next_run_size_the_slot(
    hit_path: str,
) -> None:
    # An inner step that diverges records anew inside its outer step, and is planned at
    # its next run there (inside an open step only its own key is planned). The outer
    # step is marked stale, so its next run, with nothing open below it, plans every key
    # and sizes the slot to the plans first: plan_steps() afterwards has nothing left to
    # change. Unmarked, the slot kept the size of the inner step's earlier, larger plan.
    def run(ws: Arena, large: bool) -> None:
        _run_inside(ws, ("outer",), large)

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            run(ws, large=True)
        run(ws, large=False)  # the inner step records anew
        run(ws, large=False)  # the outer step's next run: sized first
        sized = ws.stats().slots[0].capacity
        ws.plan_steps()
        assert ws.stats().slots[0].capacity == sized


def test_a_step_recorded_anew_two_steps_deep_has_the_outermost_steps_next_run_size_the_slot(
    hit_path: str,
) -> None:
    # As above, one step deeper: the innermost step records anew inside "middle" inside
    # "outer", and the walk down the steps below it goes past "middle" to "outer", the
    # step with nothing below it, which is marked stale. Its next run plans every key and
    # sizes the slot first: plan_steps() afterwards has nothing left to change. With the
    # walk stopped after one step (Round 19, steps.py _finish #27), no step was marked and
    # the slot kept the 20480 bytes of the inner step's earlier, larger plan.
    def run(ws: Arena, large: bool) -> None:
        _run_inside(ws, ("outer", "middle"), large)

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            run(ws, large=True)
        assert ws.stats().slots[0].capacity == 20480
        run(ws, large=False)  # the inner step records anew
        run(ws, large=False)  # the outermost step's next run: sized first
        sized = ws.stats().slots[0].capacity
        assert sized == 18688
        ws.plan_steps()
        assert ws.stats().slots[0].capacity == sized


def test_a_replay_inside_a_replay_counts_what_its_plan_needs_beyond_the_outer_plan(
    hit_path: str,
) -> None:
    # A replayed step counts its plan's LOAD as live; one replayed right inside another
    # counts only what its own plan needs beyond the bytes the outer plan's LOAD spares
    # there (the LOAD less the outer views live under it). "outer" (LOAD 5 KiB: x and y)
    # has x (1 KiB) live when "inner" starts, so 4 KiB spare; "inner", planned again
    # alone at 8 KiB, then counts 4 KiB more: the slot's LOAD is 9 KiB, x and inner's
    # view. With the spare counted as the LOAD plus x (Round 19, steps.py _start_inside
    # #15) the inner step counted 2 KiB, and LOAD stayed at the 8 KiB of its own runs.
    def inner(ws: Arena, floats: int) -> None:
        with ws.step("inner") as step:
            step.get_simultaneous(((floats,), F32))

    def outer(ws: Arena, floats: int) -> None:
        with ws.step("outer") as step:
            step.get_simultaneous(KIB)  # x, live across "inner"
            (y,) = step.get_simultaneous(((1024,), F32))
            step.release(y)
            inner(ws, floats)
            step.get_simultaneous(KIB)

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):  # record, plan
            inner(ws, 512)
        for _ in range(3):  # record, plan, replay (inner replays inside it)
            outer(ws, 512)
        assert ws.stats().slots[0].load == 5120
        for _ in range(2):  # inner alone: records anew at 8 KiB, then plans
            inner(ws, 2048)
        assert ws.stats().slots[0].load == 8192
        outer(ws, 2048)  # both replay: x and inner's 8 KiB live at once
        assert ws.stats().slots[0].load == 9216


def test_a_step_whose_inner_step_holds_bytes_above_its_end_is_sized_before_it_replays(
    hit_path: str,
) -> None:
    # An inner step whose run holds bytes above its end (a scope's view, then a plain
    # request) tells its outer step how far it reached: its end plus those bytes. The
    # outer step's plan covers that reach, so the slot is sized before the planned run
    # and no replay grows it; with only its end minus them, the planned run grew it.
    def run(ws: Arena) -> None:
        with ws.step("outer") as outer:
            with ws.step("inner"):
                with ws.scope() as scope:
                    scope.get_simultaneous(KIB)
                ws.get_simultaneous(((512,), F32))
            outer.get_simultaneous(KIB)

    with Arena("cpu", framework="numpy") as ws:
        run(ws)  # records: the only run that may grow the slot
        recorded = ws.stats().slots[0].growths
        for _ in range(3):  # plans, then replays
            run(ws)
            assert ws.stats().slots[0].growths == recorded


def test_a_step_recorded_again_with_other_lifetimes_plans_from_that_record_alone() -> None:
    # Records merge by the largest size of each block only where both runs made the same
    # requests with the same lifetimes. A run that keeps its first view past its planned
    # life (a divergence, then a recording) has other lifetimes: its record replaces the
    # old one. Planned from it, the step holds the kept 4 KiB view and the new 256-byte
    # one at once; merged with the old record, the second block took its old 1 KiB.
    def run(ws: Arena, released: bool) -> None:
        with ws.step("k") as step:
            (a,) = step.get_simultaneous(((1024,), F32))
            if released:
                step.release(a)
                step.get_simultaneous(((256,), F32))
            else:
                step.get_simultaneous(((64,), F32))

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            run(ws, released=True)
        assert ws.planned_bytes() == 4096
        run(ws, released=False)  # diverges at its second request: records from there
        run(ws, released=False)  # plans the new record
        assert ws.planned_bytes() == 4096 + 256


# Round 10 of the mutation tests (docs/testing.md): the steps run inside a step are kept
# with its record (StepBook.nests), and each planning of the slot sizes the outer step
# for what its inner steps' plans need now. An inner step that also runs on its own and
# plans larger there makes the slot grow for the outer step before the outer step runs.
def _outer(ws: Arena, inner: str | None = None, floats: int = 256) -> None:
    """Step "outer": a view live across the run, the step ``inner`` right inside it (a
    request of ``floats`` float32), then another view."""
    with ws.step("outer") as outer:
        outer.get_simultaneous(KIB)
        if inner is not None:
            with ws.step(inner) as step:
                step.get_simultaneous(((floats,), F32))
        outer.get_simultaneous(KIB)


def _grow_on_its_own(ws: Arena, key: str) -> None:
    """Run step ``key`` alone: planned at 4 KiB, then 32 KiB (a divergence records it
    again), planned again."""
    for floats in (1024, 8192, 8192):
        with ws.step(key) as step:
            step.get_simultaneous(((floats,), F32))


@pytest.mark.parametrize("poison", [False, True])
def test_a_step_first_run_inside_a_replay_is_covered_when_it_plans_larger(
    hit_path: str, poison: bool
) -> None:
    # The outer step records with no step inside, then replays with "inner" inside: the
    # replay's steps inside are merged into its book. "inner" then plans larger on its
    # own, and that planning sizes the slot for "outer" with "inner" inside (33792 bytes:
    # 1 KiB of outer's view under it, 32 KiB, outer's second view), so the next run of
    # "outer" grows nothing. Unmerged, the slot was sized for "inner" alone (32 KiB) and
    # the outer step's replay grew it. (With poison=True the replay exits through the
    # checked exit, Step._finish; else through the quick one, Step._end_replay.)
    with Arena("cpu", framework="numpy", poison=poison) as ws:
        _outer(ws)  # records "outer": no step inside
        _outer(ws, "inner", 1024)  # plans and replays "outer"; "inner" records inside
        _grow_on_its_own(ws, "inner")
        slot = ws.stats().slots[0]
        assert slot.capacity == 33792
        _outer(ws, "inner", 8192)
        assert ws.stats().slots[0].growths == slot.growths


def test_a_replays_other_inner_step_keeps_the_records_inner_step_covered(hit_path: str) -> None:
    # The record ran "inner" inside; a replay runs "other" there instead. The book keeps
    # both (merged), so when "inner" plans larger on its own the slot is sized for
    # "outer" with it inside; with the replay's alone, the next run of "outer" with
    # "inner" grew the slot.
    with Arena("cpu", framework="numpy") as ws:
        _outer(ws, "inner", 1024)  # records "outer" with "inner" inside
        _outer(ws, "other", 256)  # plans and replays "outer", with "other" inside
        _grow_on_its_own(ws, "inner")
        slot = ws.stats().slots[0]
        assert slot.capacity == 33792
        _outer(ws, "inner", 8192)
        assert ws.stats().slots[0].growths == slot.growths


def test_a_record_merged_with_a_larger_run_keeps_both_runs_inner_steps(hit_path: str) -> None:
    # A run that diverges (a larger first view) records again with the same requests and
    # lifetimes: the record merges with it, sizes by the largest, and its steps inside
    # with the earlier record's ("inner", then "other" in the new run). When "inner"
    # then plans larger on its own, the slot is sized for "outer" with it inside (34816
    # bytes: the merged 2 KiB first view under it); keeping the new run's steps alone,
    # the next run of "outer" with "inner" grew the slot.
    with Arena("cpu", framework="numpy") as ws:
        _outer(ws, "inner", 1024)  # records "outer" with "inner" inside
        with ws.step("outer") as outer:  # plans "outer"; diverges at its first request
            outer.get_simultaneous(((512,), F32))
            with ws.step("other") as step:
                step.get_simultaneous(KIB)
            outer.get_simultaneous(KIB)
        _grow_on_its_own(ws, "inner")
        slot = ws.stats().slots[0]
        assert slot.capacity == 34816
        _outer(ws, "inner", 8192)
        assert ws.stats().slots[0].growths == slot.growths


def test_a_step_recorded_above_a_step_it_was_opened_below_marks_that_step_stale(
    hit_path: str,
) -> None:
    # Step "a" is opened, "b" inside it; "a" closes first (out of order, with an error:
    # no record) and is entered again, now above "b", where it records. Each names the
    # other as the step below it (a.nested is b, b.nested is a): the walk to the
    # outermost step from "a" stops at "b", a step already seen once "a" itself counts
    # as seen, and marks "b" stale. "b"'s next run, with nothing open, plans and sizes the
    # slot (3 KiB: "b" at byte 0 and what it held above it, the 2 KiB "a" recorded);
    # with "a" marked instead of "b", the slot kept the 4 KiB those runs grew it to.
    def run_b(ws: Arena) -> None:
        with ws.step("b") as step:
            step.get_simultaneous(KIB)

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            run_b(ws)
        a, b = ws.step("a"), ws.step("b")
        a.__enter__()
        a.get_simultaneous(KIB)
        b.__enter__()
        b.get_simultaneous(KIB)
        error = RuntimeError("a ends first")
        a.__exit__(RuntimeError, error, None)
        a.__enter__()
        a.get_simultaneous(((512,), F32))
        a.__exit__(None, None, None)
        b.__exit__(None, None, None)
        assert ws.stats().slots[0].capacity == 4096
        run_b(ws)
        assert ws.stats().slots[0].capacity == 3072


def test_a_recording_release_interrupted_at_the_stacks_call_keeps_the_books(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Round 10 of the mutation tests (steps.py _start_inside #9 showed it): an interrupt
    # at release()'s call of the stack, in a recording run, left the block freed for the
    # run's next requests while the step and the slot still counted its bytes live, so
    # LOAD passed the capacity (3072 bytes on a 2048-byte slot). Since the stack recounts
    # its live bytes from what the regions hold (RegionStack.settle, after the step's own
    # stores), interrupted there the release is made (the block is free, the step's count
    # follows the run's live blocks) and the stack's figure, left behind, is recounted by
    # the next request, which reuses the block's bytes.
    from arena.slots.stack import RegionStack

    settle = RegionStack.settle

    def interrupted(self: RegionStack, top: int, region: object) -> None:
        if sum(region.held for region in self.regions) < self.live:  # a release
            raise KeyboardInterrupt
        settle(self, top, region)

    with Arena("cpu", framework="numpy") as ws, ws.step("k") as step:
        slot = ws.numpy._select()
        step.get_simultaneous(KIB)
        (b,) = step.get_simultaneous(KIB)
        with monkeypatch.context() as m:
            m.setattr(RegionStack, "settle", interrupted)
            with pytest.raises(KeyboardInterrupt):
                step.release(b)
        with pytest.raises(ArenaError, match="released already"):
            step.release(b)
        step.get_simultaneous(KIB)
        stats = ws.stats().slots[0]
        assert stats.load <= stats.capacity == 2048
        assert slot.stack.live == step.held == 2048


def test_a_replayed_request_after_a_growth_inside_the_step_is_served_from_the_new_buffer(
    hit_path: str,
) -> None:
    # planted49: the Python replay's hit without its `slot.buffer is self._buffer` test
    # (the step's remembered views are over the buffer it entered with) served the second
    # request from the buffer reserve_bytes() had just replaced (the old block, counted
    # freed), where the compiled hit and the checked path serve it from the new one; all
    # of tests/planning passed with it, on both paths.
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        for grow in (False, False, False, True):
            with ws.step("k") as step:
                (a,) = step.get_simultaneous(((64,), F32))
                if grow:
                    ws.reserve_bytes(1 << 20)
                (b,) = step.get_simultaneous(((64,), F32))
                allocation, capacity = slot.buffer.allocation, slot.buffer.capacity
                assert allocation is not None
                start = allocation.ptr
                assert start <= ptr(ws, b) < start + capacity, (hit_path, grow)
                b[:] = 2
                assert capacity == (1 << 20 if grow else 512)
        a[:] = 1
        assert np.all(b == 2)
