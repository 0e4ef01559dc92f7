"""Round 14b's mutation gaps in the slots group (``arena/slots/table.py``,
``arena/slots/persistent.py``): each test fails on the mutant it names (planted by hand,
seen to fail) and passes on the real code."""

from __future__ import annotations

import numpy as np
import pytest

from arena import Arena, ArenaAsleepError, ArenaEvent, ArenaWarning, ConfigError
from arena.memory.virtual import PAGE


def test_a_persistent_buffer_asked_for_while_asleep_is_named_in_the_error() -> None:
    # persistent.py PersistentStore.buffer #2 (check_awake(None)): the asleep error of a
    # persistent buffer read "None from '...'" instead of naming the buffer.
    with Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy") as ws:
        ws.numpy.get_persistent("kv", (16,), "float32")
        ws.sleep()
        with pytest.raises(ArenaAsleepError) as caught:
            ws.numpy.get_persistent("kv", (16,), "float32")
        assert str(caught.value).startswith("persistent buffer 'kv' from '"), caught.value
        ws.wake()


def test_a_numpy_int_reserve_is_refused_naming_the_int_to_pass() -> None:
    # table.py SlotTable.reserve #8 (plain_int_fix(None)): reserve_bytes(np.int64(n))
    # was refused without the fix (pass int(...) of it).
    with Arena("cpu", framework="numpy") as ws, pytest.raises(ConfigError) as caught:
        ws.reserve_bytes(np.int64(4096))  # type: ignore[arg-type]
    assert str(caught.value).endswith("(int64 is not a Python int: pass int(...) of it, 4096)"), (
        caught.value
    )


def test_the_wake_event_carries_the_bytes_the_sleep_event_released() -> None:
    # table.py SlotTable.wake #14 (new_bytes None): the "wake" event's new_bytes, the
    # bytes committed again, was None.
    events: list[ArenaEvent] = []
    with Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy") as ws:
        ws.numpy.get_simultaneous(((4 * PAGE,), "uint8"))
        ws.add_listener(events.append)
        ws.sleep()
        ws.wake()
    slept, woke = (e for e in events if e.kind in ("sleep", "wake"))
    assert (slept.kind, woke.kind) == ("sleep", "wake")
    assert slept.old_bytes >= 4 * PAGE and slept.new_bytes == 0
    assert (woke.old_bytes, woke.new_bytes) == (0, slept.old_bytes)


def test_a_locked_in_place_growth_says_what_it_committed_in_its_warning_and_event() -> None:
    # table.py SlotTable._announce_locked_growths #3 (`new + old` bytes committed in the
    # warning) and #7 (the "locked_growth" event's new_bytes None).
    events: list[ArenaEvent] = []
    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        a.lock(growth="in_place")
        a.add_listener(events.append)
        with pytest.warns(ArenaWarning, match="warned once per call site") as caught:
            a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))
    (resize,) = (e for e in events if e.kind == "resize")
    (grown,) = (e for e in events if e.kind == "locked_growth")
    old, new = resize.old_bytes, resize.new_bytes
    assert 0 < old < new
    assert (grown.slot, grown.old_bytes, grown.new_bytes) == (resize.slot, old, new)
    (warning,) = caught
    assert f"needed {new} bytes" in str(warning.message)
    assert f"which held {old}: {new - old} bytes were committed" in str(warning.message)
