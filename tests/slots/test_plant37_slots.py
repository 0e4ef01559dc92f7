"""Plant round 37 (slots): a slot's detour flag and growth to match its lane."""

from __future__ import annotations

from arena import Arena

PAGE = 4096


def test_a_sibling_s_growth_detours_its_plain_hit_until_it_grows_to_match() -> None:
    """A slot whose sibling grew larger detours its next plain request (even one the hit
    path knows) and grows to match the lane (slip: ``update_detour`` ignoring ``pending``,
    the repeated request served from the old, smaller buffer)."""
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(1):
            slot = a.numpy._select()
            for _ in range(3):  # known to the hit path
                a.numpy.get_simultaneous(((PAGE,), "uint8"))
            small = slot.buffer.capacity
        with a.ubatch(0):
            a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))
            large = a.numpy._select().buffer.capacity
        assert large > small
        assert slot.pending == large and slot.detour == 1
        with a.ubatch(1):
            a.numpy.get_simultaneous(((PAGE,), "uint8"))
        assert slot.buffer.capacity == large and (slot.pending, slot.detour) == (0, 0)


def test_plan_steps_inside_a_scope_leaves_the_slot_s_buffer_in_place() -> None:
    """``plan_steps()`` called while a scope is open sizes no slot under it: the scope's
    views and its next requests share one buffer (slip: ``Slot.fit`` not refusing while
    regions are open, the buffer replaced under the open scope)."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:  # recorded with a hole its plan does without
            first, _ = step.get_simultaneous(((4 * PAGE,), "uint8"), ((4 * PAGE,), "uint8"))
            step.release(first)
            step.get_simultaneous(((8 * PAGE,), "uint8"))
        slot = ws.numpy._select()
        with ws.scope() as scope:
            scope.get_simultaneous(((PAGE,), "uint8"))
            buffer = slot.buffer
            ws.plan_steps()
            assert slot.buffer is buffer
        ws.plan_steps()  # nothing open: sized to the plan now (16 pages recorded, 12 planned)
        assert slot.buffer is not buffer and slot.buffer.capacity < buffer.capacity


def test_a_scope_closed_while_a_sibling_s_growth_is_pending_keeps_the_detour(
    hit_path: str,
) -> None:
    """A scope closed while its slot has a sibling's growth pending leaves the detour
    raised, on either path: the next plain request grows the slot to match (slip: the
    compiled exit lowering the flag with only the regions and sleep in mind)."""
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(1):
            slot = a.numpy._select()
            for _ in range(3):  # known to the hit path
                a.numpy.get_simultaneous(((PAGE,), "uint8"))
            with a.scope() as scope:
                scope.get_simultaneous(((PAGE,), "uint8"))
                with a.ubatch(0):
                    a.numpy.get_simultaneous(((8 * PAGE,), "uint8"))
                    large = a.numpy._select().buffer.capacity
                assert slot.pending == large > slot.buffer.capacity
        assert slot.detour == 1
        with a.ubatch(1):
            a.numpy.get_simultaneous(((PAGE,), "uint8"))
        assert slot.buffer.capacity == large and (slot.pending, slot.detour) == (0, 0)
