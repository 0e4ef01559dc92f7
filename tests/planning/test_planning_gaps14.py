"""Mutation round 14a (issue 26 item 12): the planning layer's sampled survivors.

Two mutants the planning group's tests let through (docs/testing.md, Round 14a): a step
run inside another step told the outer step's record its reach less what it held above
its end, not plus (``Step._finish``), and ``share_plans``' default of no slot frozen
read past the end of the empty default (``lift_outer_steps``).
"""

from __future__ import annotations

from arena import Arena
from arena.planning.books import books_of
from arena.planning.plan import share_plans

F32 = "float32"
KIB = ((256,), F32)


def test_a_step_run_inside_another_tells_its_record_its_reach_with_what_it_held_above(
    hit_path: str,
) -> None:
    # "inner" runs right inside "outer", above outer's 1 KiB view: from byte 1024 to
    # 2048 with its own view, and a scope opened inside it reaches 1 KiB above its end
    # (byte 3072). The outer step's record keeps the inner step with its reach from its
    # start: 2048 bytes, its own 1 KiB plus the 1 KiB it held above its end
    # (StepBook.nests; the planning covers an inner key not planned yet with it,
    # cover_nested). Mutant killed: Step._finish #62 (``end - self.above - start``: 0).
    with Arena("cpu", framework="numpy") as ws:
        with ws.numpy.step("outer") as outer:
            slot = outer.slot
            assert slot is not None
            outer.get_simultaneous(KIB)
            with ws.numpy.step("inner") as inner:
                inner.get_simultaneous(KIB)
                with ws.numpy.scope() as scope:
                    scope.get_simultaneous(KIB)
            outer.get_simultaneous(KIB)
        books = books_of(slot)
        assert books["inner"].above == 1024
        [(request, key, _place, reach)] = books["outer"].nests
        assert (request, key, reach) == (1, "inner", 2048)


def test_share_plans_with_no_slot_frozen_by_default_plans_as_with_none_frozen() -> None:
    # share_plans' ``frozen`` defaults to () (no slot's buffer captured): a lane of any
    # length plans as with every slot named not frozen. Mutant killed: lift_outer_steps
    # #4 (``i <= len(frozen)``: frozen[0] read of the empty default, an IndexError).
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):  # a record; the second run plans it
            with ws.numpy.step("outer") as outer:
                slot = outer.slot
                assert slot is not None
                outer.get_simultaneous(KIB)
                with ws.numpy.step("inner") as inner:
                    inner.get_simultaneous(KIB)
        assert slot is not None
        books = books_of(slot)
        by_default = [{k: b.copy() for k, b in books.items()} for _ in range(2)]
        none_frozen = [{k: b.copy() for k, b in books.items()} for _ in range(2)]
        need = share_plans(none_frozen, 256, frozen=[False, False])
        assert need == books["outer"].reach > 0
        assert share_plans(by_default, 256) == need
        for lane in (by_default, none_frozen):
            assert [b.above for s in lane for b in s.values()] == [
                b.above for s in none_frozen for b in s.values()
            ]
