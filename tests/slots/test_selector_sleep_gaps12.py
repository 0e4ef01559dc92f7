"""Gaps in the tests of slot selection and sleep (``arena/slots/selector.py``,
``arena/slots/sleep.py``), found by Round 12a of mutation testing (``scripts/mutation
parts``, docs/testing.md): each test names the mutants it kills."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaOutOfMemoryError, ConfigError, SlotError
from arena.slots.selector import SlotSelector


class _Binding(threading.local):
    ubatch = 0


def _selector(slots: int, lanes: int) -> SlotSelector:
    """A selector over stand-in slots (it only indexes them)."""
    return SlotSelector(
        [f"slot {i}" for i in range(slots)],  # type: ignore[misc]
        lanes=lanes,
        ubatch_resolver=None,
        lane_resolver=None,
        name="test_lane",
        binding=_Binding,
    )


def test_the_join_hook_runs_once_per_thread_at_its_first_selection_in_python() -> None:
    """``_select`` #3 (the hook never run where the slot is selected in Python, several
    lanes here) and ``_join`` #13 (``==``: the hook run only where it already ran)."""
    selector = _selector(4, lanes=2)
    joined: list[str] = []
    selector.on_join(lambda: joined.append(threading.current_thread().name))
    select = selector.select
    assert select() == "slot 0"
    assert select() == "slot 0"
    assert joined == ["MainThread"]
    worker = threading.Thread(target=lambda: selector.bind_ubatch(1), name="worker")
    worker.start()
    worker.join()
    assert joined == ["MainThread", "worker"]
    with selector.lane(1):
        assert select() == "slot 1"
    assert joined == ["MainThread", "worker"]


def test_a_resolver_answer_one_past_the_last_ubatch_is_a_slot_error() -> None:
    """``_select`` #13 (``ubatch <= ubatches``: the slot past the last one indexed, an
    IndexError, or another lane's slot)."""
    a = Arena("cpu", framework="numpy", ubatches=2, lanes=2, ubatch_resolver=lambda: 2)
    with pytest.raises(SlotError) as caught:
        a.get_simultaneous(((4,), "uint8"))
    assert str(caught.value) == (
        "ubatch_resolver returned 2, but this arena has 2 ubatch slot(s) (0..1); "
        "construct the arena with ubatches=3 or more"
    )
    a.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        # _resolved #37: the fix one too many (index + 2)
        (
            5,
            "ubatch_resolver returned 5, but this arena has 2 ubatch slot(s) (0..1); "
            "construct the arena with ubatches=6 or more",
        ),
        # _resolved #21: the type named NoneType
        (
            "1",
            "ubatch_resolver returned '1' (str), not an integer; return the ubatch index as "
            "an int in 0..1",
        ),
    ],
)
def test_a_resolver_answer_refused_names_the_answer_and_the_fix(answer: Any, message: str) -> None:
    a = Arena("cpu", framework="numpy", ubatches=2, ubatch_resolver=lambda: answer)
    with pytest.raises(SlotError) as caught:
        a.get_simultaneous(((4,), "uint8"))
    assert str(caught.value) == message
    a.close()


def test_an_index_out_of_range_names_the_range_and_the_fix() -> None:
    """``check_index`` #33 (the range's end one too far)."""
    a = Arena("cpu", framework="numpy", ubatches=2)
    with pytest.raises(SlotError) as caught:
        a.bind_ubatch(5)
    assert str(caught.value) == (
        "ubatch 5 is out of range: this arena has 2 ubatch slot(s) (0..1); construct the "
        "arena with ubatches=6 or more"
    )
    a.close()


def test_a_binding_a_resolver_overrides_names_the_call() -> None:
    """``bind_ubatch`` #3 (the call left out: ``so None would have no effect``)."""
    a = Arena("cpu", framework="numpy", ubatches=2, ubatch_resolver=lambda: 0)
    with pytest.raises(ConfigError, match=r", so bind_ubatch\(1\) would have no effect; "):
        a.bind_ubatch(1)
    a.close()


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)
def test_a_sleep_whose_host_copies_run_out_of_memory_stays_awake_with_its_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fall_asleep`` #38, #39 (the copies written back with an argument missing: a
    TypeError replaced the out-of-memory error, and the arena was left marked asleep)."""
    from arena.memory.virtual import VirtualHostSource

    a = Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy")
    weights = a.numpy.get_persistent("w", (4096,), "uint8")
    weights[:] = 7
    library = a.get_library_workspace("lib", 8192)
    library[:] = 9
    offload = VirtualHostSource.offload
    calls: list[Any] = []

    def failing(self: VirtualHostSource, allocation: Any) -> Any:
        calls.append(allocation)
        if len(calls) == 2:
            raise MemoryError("injected")
        return offload(self, allocation)

    monkeypatch.setattr(VirtualHostSource, "offload", failing)
    with pytest.raises(ArenaOutOfMemoryError, match="could not copy"):
        a.sleep(1)
    monkeypatch.undo()
    assert not a.is_asleep
    assert (weights == 7).all() and (library == 9).all()
    (scratch,) = a.get_simultaneous(((4096,), "uint8"))  # served: awake
    assert isinstance(scratch, np.ndarray)
    a.close()
