"""Compiled step and scope hits against bugs planted in them by hand (branch plant41,
docs/testing.md 'Planted, 2026-12-03 (plant41)'): what a scope served by the hit inside
a step tells the step, and release() of one view given twice in a step of many blocks."""

from __future__ import annotations

import pytest

from arena import Arena
from arena.errors import ArenaError
from arena.planning.books import books_of

F32 = "float32"


def test_a_scope_hit_right_inside_a_step_tells_the_step_what_it_reached(hit_path: str) -> None:
    """A scope opened right inside a step reaches above the step's end; the step's
    replays must learn that reach (StepBook.above), which only the scope's Python path
    tells it (Slot.note_load -> Step.note_above), so the compiled scope hit hands a scope
    with a step below it to Python. Plant killed: scope_serve's check of the regions
    below stopping one short (``i + 1 < depth - 1``), which let the hit serve a scope
    whose region right below is a step: the first replay then counted nothing above
    its end (above 0, not 1024) and the key's reach shrank by the scope's bytes."""
    with Arena("cpu", framework="numpy", track_call_sites=False) as ws:
        ws.reserve_bytes(1 << 16)  # the plain high-water mark covers the scope's reach
        for run in range(5):
            with ws.numpy.step("outer") as step:
                slot = step.slot
                assert slot is not None
                step.get_simultaneous(((64,), F32))
                with ws.numpy.scope() as scope:
                    scope.get_simultaneous(((256,), F32))  # 1024 bytes above the step
            book = books_of(slot)["outer"]
            assert book.above == 1024, (run, book.above)
            assert book.reach == book.base + book.total + 1024


def test_one_view_given_twice_is_refused_past_block_256(hit_path: str) -> None:
    """release(view, view) is refused ('released twice in this call') and releases
    nothing, whatever the block's number. Plant killed: step_release_views comparing
    two found blocks by object identity (``blocks[i] == block``) rather than value:
    ints up to 256 are CPython's shared small ints, so only a block past 256 slipped
    through and was released, with no error."""
    count = 300
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, then replays (the compiled release serves those)
            with ws.numpy.step("many") as step:
                views = [step.get_simultaneous(((4,), F32))[0] for _ in range(count)]
                last = views[-1]
                with pytest.raises(ArenaError, match="released twice in this call"):
                    step.release(last, last)
                step.release(last)  # still live: nothing was released
                with pytest.raises(ArenaError, match="released already"):
                    step.release(last)
