"""The slots layer's C-API for the compiled code above it (issue 27 item 3): the extension
``arena.slots._slot`` exports the Slot's and its RegionStack's own stores as a capsule
(``arena/slots/_slot_api.h``), the compiled hit imports it, and where it cannot the hit
runs in Python; the stores it makes are those of the Slot's and the stack's methods
(tests/views/test_hit_differential.py and the step and scope hit tests compare them).
tests/test_layers.py holds that no C module above the slots layer stores a slot's fields."""

from __future__ import annotations

import subprocess
import sys

from arena import Arena
from tests.conftest import need_compiled_hit


def test_the_slots_layer_exports_its_stores_as_a_capsule_and_nothing_else() -> None:
    need_compiled_hit()
    slot_api = sys.modules["arena.slots._slot"]  # imported by arena.views._hit
    assert type(slot_api._C_API).__name__ == "PyCapsule"
    assert repr(slot_api._C_API).startswith('<capsule object "arena.slots._slot._C_API"')
    assert sorted(n for n in vars(slot_api) if not n.startswith("__")) == ["_C_API"]


def test_without_the_slots_layer_s_c_api_the_hit_runs_in_python() -> None:
    """A build whose ``arena.slots._slot`` does not import (stood in for by a blocked
    import): the compiled hit refuses to import, and the pure-Python hit serves."""
    need_compiled_hit()
    code = (
        "import sys\n"
        "sys.modules['arena.slots._slot'] = None\n"
        "from arena.views import hit\n"
        "from arena import Arena\n"
        "with Arena('cpu', framework='numpy') as ws:\n"
        "    for _ in range(3):\n"
        "        ws.numpy.get_simultaneous(((4, 4), 'float32'))\n"
        "    calls = ws.stats().slots[0].calls\n"
        "print(hit.HIT_PATH, calls)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["python", "3"]


def test_a_step_and_a_scope_leave_the_slot_as_python_would() -> None:
    """The compiled step and scope enters and exits (the table's open_region, note_load
    and close_region) leave the region stack empty, its top and live bytes 0, the detour
    flag down and LOAD at the step's plan."""
    need_compiled_hit()
    spec = ((64, 64), "float32")
    with Arena("cpu", framework="numpy") as ws:
        for index in range(5):  # record, plan, replay; then locked, the compiled enters
            if index == 3:
                ws.lock()
            with ws.numpy.step("k") as st:
                st.get_simultaneous(spec)
                st.get_simultaneous(spec)
                slot = st.slot
                assert slot is not None
                assert slot.detour == 1 and slot.stack.regions == [st]
                assert slot.load >= slot.stack.live > 0
            with ws.numpy.scope() as sc:
                sc.get_simultaneous(spec)
                assert slot.stack.regions == [sc] and slot.stack.top == slot.stack.live > 0
            assert slot.stack.regions == []
            assert (slot.stack.top, slot.stack.live, slot.detour) == (0, 0, 0)
