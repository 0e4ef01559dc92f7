"""What errors, events and logs say, held to exact values: an error carries the numbers
and names it reports as attributes and in its message; a refused operation leaves nothing
behind (no allocation, no release, no event); listeners and the debug log hear of every
change with its kind and sizes; the memory snapshot names what each block is for."""

from __future__ import annotations

import gc
import logging
import re
import sys
from typing import Any

import numpy as np
import pytest

from arena import (
    Allocation,
    Arena,
    ArenaError,
    ArenaEvent,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    DTypeError,
    GraphCaptureError,
    PersistentMismatchError,
    SlotError,
    SpecError,
    compute_layout,
)
from arena.slots.slot import Buffer, check_in_bounds
from tests.gates import Probe
from tests.profiles import profile_data
from tests.sources import FailingSource, FaultySource, RecordingSource, check_books

F32 = "float32"
MAX_BYTES = 2**63 - 1


# ---------------------------------------------------------------------- locked errors
def _locked_request(a: Arena) -> ArenaLockedError:
    with pytest.raises(ArenaLockedError) as info:
        a.get_simultaneous(((2000,), F32))
    return info.value


def test_a_locked_request_error_carries_its_caller_sizes_and_slot() -> None:
    with Arena("cpu", ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))
        a.lock()
        with a.ubatch(1):
            error = _locked_request(a)
    assert error.caller.startswith("test_error_details.py:") and "_locked_request" in error.caller
    assert (error.required, error.current, error.slot, error.key) == (8192, 4096, (1, 0), None)
    message = str(error)
    assert message == (
        f"arena is locked but allocation from '{error.caller}' requires 0.01 MB (8192 bytes), "
        "current size is 0.00 MB (4096 bytes) in slot (ubatch 1, lane 0) on cpu; growth after "
        "lock() is refused. Warm up this size before locking, presize with reserve(), or use "
        "try_get_simultaneous() to fall back"
    )


def test_a_locked_error_says_never_sized_only_for_a_slot_that_never_grew() -> None:
    with Arena("cpu", lanes=2, framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
        a.lock()
        with a.lane(1):
            never = _locked_request(a)
        grown = _locked_request(a)
    assert str(never).count(" (this slot was never sized during warm-up);") == 1
    assert "in slot (ubatch 0, lane 0) on cpu; growth after lock()" in str(grown)


@pytest.mark.parametrize("what", ["buffer", "resource"])
def test_a_new_persistent_key_while_locked_carries_its_key_slot_and_caller(what: str) -> None:
    with Arena("cpu", ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
        a.get_persistent_resource("made", dict)  # ubatch 0 made a resource during warm-up
        a.lock()
        with a.ubatch(1), pytest.raises(ArenaLockedError) as info:
            if what == "buffer":
                a.get_persistent("new", (4,), F32)
            else:
                a.get_persistent_resource("new", dict)
        with a.ubatch(1), pytest.raises(ArenaLockedError) as sibling:
            a.get_persistent_resource("made", dict)
    error = info.value
    assert (error.key, error.slot, error.required, error.current) == ("new", (1, 0), 0, 0)
    assert error.caller.startswith("test_error_details.py:")
    assert str(error) == (
        f"arena is locked but '{error.caller}' asks for a new persistent {what} 'new' in slot "
        f"(ubatch 1, lane 0); create persistent {what}s during warm-up, before lock()"
    )
    assert (sibling.value.key, sibling.value.slot) == ("made", (1, 0))
    assert (
        "; slot (ubatch 0, lane 0) created it during warm-up but this one never ran then. "
        "Warm up every micro-batch before lock() (one step with each ubatch bound: "
        "Arena.ubatch(i)), or create the resource on each ubatch first"
    ) in str(sibling.value)


def test_a_resource_made_by_two_siblings_names_both() -> None:
    with Arena("cpu", ubatches=3, framework="numpy") as a:
        for ubatch in (0, 1):
            with a.ubatch(ubatch):
                a.get_persistent_resource("made", dict)
        a.lock()
        with a.ubatch(2), pytest.raises(ArenaLockedError) as info:
            a.get_persistent_resource("made", dict)
    assert "; slot (ubatch 0, lane 0), (ubatch 1, lane 0) created it" in str(info.value)


def test_a_persistent_mismatch_carries_both_sides() -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_persistent(("kv", 3), (4, 8), "float16")
        with pytest.raises(PersistentMismatchError) as info:
            a.get_persistent(("kv", 3), (8, 4), F32)
    error = info.value
    assert error.key == ("kv", 3)
    assert error.existing == ((4, 8), "float16") and error.requested == ((8, 4), "float32")
    assert str(error) == (
        "persistent buffer ('kv', 3) in slot (ubatch 0, lane 0) was created as shape (4, 8) "
        "float16, now requested as (8, 4) float32; use another key for a different buffer"
    )


def test_unhashable_keys_and_factories_that_cannot_be_called_are_named() -> None:
    with Arena("cpu", framework="numpy") as a:
        with pytest.raises(SpecError) as buffer_key:
            a.get_persistent(["kv"], (4,), F32)
        with pytest.raises(SpecError) as resource_key:
            a.get_persistent_resource({"k": 1}, dict)
        with pytest.raises(SpecError) as factory:
            a.get_persistent_resource("k", 42)  # type: ignore[arg-type]
    assert str(buffer_key.value) == (
        "persistent key ['kv'] (list) is not hashable; use a str, an int or a tuple of them"
    )
    assert "persistent key {'k': 1} (dict) is not hashable" in str(resource_key.value)
    assert str(factory.value) == "factory must be callable with no arguments, got 42"


# ---------------------------------------------------------------------- refusals
def test_growth_during_a_capture_is_refused_and_nothing_is_allocated_or_released() -> None:
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as a:
        a.get_simultaneous(((1000,), F32))
        before = list(source.events)
        probe.capturing = True
        with pytest.raises(GraphCaptureError) as grow:
            a.get_simultaneous(((1 << 16,), F32))
        with pytest.raises(GraphCaptureError) as reserve:
            a.reserve_bytes(1 << 20)
        with pytest.raises(GraphCaptureError) as persistent:
            a.get_persistent("kv", (16,), F32)
        assert source.events == before  # refused before anything happened
        assert a.stats().slots[0].capacity == 4096
        assert a.stats().slots[0].persistent_keys == 0
        probe.capturing = False
        check_books(a, source)
    assert str(grow.value).startswith(
        "growing slot (ubatch 0, lane 0) to 262144 bytes on cpu was requested while a CUDA "
        "graph is being captured; it would corrupt the capture."
    )
    assert str(reserve.value).startswith("growing slot (ubatch 0, lane 0) to 1048576 bytes")
    assert str(persistent.value).startswith(
        "allocating persistent buffer 'kv' of slot (ubatch 0, lane 0) on cpu was requested"
    )


def test_out_of_memory_names_the_bytes_what_they_are_for_and_the_device() -> None:
    source = FailingSource(limit=1 << 12)
    with Arena(source=source, framework="numpy") as a:
        with pytest.raises(ArenaOutOfMemoryError) as scratch:
            a.get_simultaneous(((1 << 12,), F32))
        with pytest.raises(ArenaOutOfMemoryError) as persistent:
            a.get_persistent("kv", (1 << 12,), F32)
        check_books(a, source)
    assert str(scratch.value).startswith(
        "could not allocate 16384 bytes (0.02 MB) for the scratch buffer of slot (ubatch 0, "
        "lane 0) on cpu from "
    )
    assert "for persistent buffer 'kv' of slot (ubatch 0, lane 0) on cpu" in str(persistent.value)
    assert str(scratch.value).endswith(
        "; free memory elsewhere, request less, or presize with reserve() earlier"
    )


def test_out_of_memory_on_a_gpu_names_jax_preallocation_when_jax_is_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arena import CPU, Device
    from arena.memory.ledger import oom_hint

    cuda = Device("cuda", 0)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert oom_hint(cuda) == ""  # JAX not imported: nothing to say
    monkeypatch.setitem(sys.modules, "jax", object())
    assert oom_hint(CPU) == ""  # host memory: JAX's GPU pool is not the cause
    assert oom_hint(cuda) == (
        ". JAX is imported with preallocation on: it holds 75% of GPU memory from its first "
        "use. Set XLA_PYTHON_CLIENT_PREALLOCATE=false (or a smaller "
        "XLA_PYTHON_CLIENT_MEM_FRACTION) before importing JAX"
    )
    for off in ("false", "0", " False "):
        monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", off)
        assert oom_hint(cuda) == ""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    assert oom_hint(cuda).startswith(". JAX is imported with preallocation on")


def test_a_block_released_twice_is_counted_once() -> None:
    from arena.memory.ledger import Ledger

    source = RecordingSource()
    ledger = Ledger(source)
    block = ledger.allocate(256, "a test block")
    ledger.release(block)
    ledger.release(block)  # already gone: nothing happens
    assert (ledger.allocations, ledger.frees, ledger.live_blocks) == (1, 1, 0)
    assert source.events == [("allocate", 256), ("release", 256)]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_a_growth_that_cannot_get_its_old_size_back_says_so_in_a_note() -> None:
    source = FaultySource(fail_at={2, 3})
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))
        with pytest.raises(ArenaOutOfMemoryError) as info:
            a.get_simultaneous(((1 << 16,), F32))
    assert info.value.__notes__ == [
        "arena: slot (ubatch 0, lane 0) could not get its old 4096-byte buffer back either; "
        "it holds no memory now"
    ]


def test_views_past_their_buffer_are_refused_by_name() -> None:
    with Arena("cpu", framework="numpy") as a:
        slot = a._table.slots[0]
        layout = compute_layout((((100,), F32),))
        with pytest.raises(ArenaError) as info:
            check_in_bounds(slot, Buffer(None, 256), layout)
        check_in_bounds(slot, Buffer(None, 512), layout)  # exactly fits
        check_in_bounds(slot, Buffer(None, 0), compute_layout((((0,), F32),)))
    assert str(info.value) == (
        "refusing to build views of 512 bytes over the 256-byte buffer of slot (ubatch 0, "
        "lane 0); this is a bug in arena, please report it"
    )


def test_reserve_checks_its_arguments() -> None:
    with Arena("cpu", lanes=2, framework="numpy") as a:
        assert a.reserve_bytes(0) == 0 and a.stats().allocations == 0
        for bad in (-1, True, 4096.0, "4096"):
            with pytest.raises(ConfigError, match="nbytes must be an int >= 0"):
                a.reserve_bytes(bad)  # type: ignore[arg-type]
        with pytest.raises(SpecError, match="more than the"):
            a.reserve_bytes(MAX_BYTES + 1)
        with pytest.raises(ArenaOutOfMemoryError):  # addressable, but not once aligned
            a.reserve_bytes(MAX_BYTES)
        with pytest.raises(SlotError) as lane:
            a.reserve_bytes(256, lane=2)
        assert str(lane.value).startswith("lane 2 is out of range")


def test_reserve_sizes_only_the_lane_asked_for_and_refuses_only_what_does_not_fit() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, lanes=2, framework="numpy") as a:
        a.reserve_bytes(4096, lane=1)
        assert [s.capacity for s in a.stats().slots] == [0, 4096, 0, 4096]
        a.reserve_bytes(1024)
        assert [s.capacity for s in a.stats().slots] == [1024, 4096, 1024, 4096]
        a.lock()
        before = list(source.events)
        assert a.reserve_bytes(1024) == 1024  # every slot holds it already: not refused
        assert a.reserve_bytes(4096, lane=1) == 4096
        with pytest.raises(ArenaLockedError) as info:
            a.reserve_bytes(2048)
        assert source.events == before
    assert info.value.slot == (0, 0) and info.value.required == 2048
    assert str(info.value) == (
        f"arena is locked but reserve() from '{info.value.caller}' requires 0.00 MB (2048 "
        "bytes), current size is 0.00 MB (1024 bytes) in slot (ubatch 0, lane 0) on cpu; "
        "growth after lock() is refused. reserve() sizes slots ahead of the requests: call it "
        "before lock(), or inside with ws.unlocked(): ..."
    )


def test_reserve_while_locked_says_to_reserve_before_lock_not_to_reserve() -> None:
    # The request's fix ("presize with reserve()") told a reserve() call to call itself.
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
        a.lock()
        with pytest.raises(ArenaLockedError) as info:
            a.reserve(((1000,), F32))
        request = _locked_request(a)
    assert info.value.caller.startswith("test_error_details.py:")
    assert (info.value.required, info.value.current) == (4096, 256)
    assert str(info.value) == (
        f"arena is locked but reserve() from '{info.value.caller}' requires 0.00 MB (4096 "
        "bytes), current size is 0.00 MB (256 bytes) in slot (ubatch 0, lane 0) on cpu; "
        "growth after lock() is refused. reserve() sizes slots ahead of the requests: call it "
        "before lock(), or inside with ws.unlocked(): ..."
    )
    assert str(request).startswith("arena is locked but allocation from ")
    assert str(request).endswith(
        "presize with reserve(), or use try_get_simultaneous() to fall back"
    )


def test_a_locked_scope_or_step_request_names_reserve_bytes_not_a_fallback_it_lacks() -> None:
    # A scope or step request refused while locked told a new user to "use
    # try_get_simultaneous() to fall back", which scopes and steps do not have.
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
        a.lock()
        messages = []
        with pytest.raises(ArenaLockedError) as scope, a.scope() as s:
            s.get_simultaneous(((1000,), F32))
        messages.append(str(scope.value))
        with pytest.raises(ArenaLockedError) as step, a.step("new") as st:
            st.get_simultaneous(((1000,), F32))
        messages.append(str(step.value))
        with a.unlocked():
            a.reserve_bytes(4096)  # the fix the messages name
        with a.scope() as s:
            s.get_simultaneous(((1000,), F32))
        with a.step("new") as st:
            st.get_simultaneous(((1000,), F32))
    for kind, message in zip(("scope", "step"), messages, strict=True):
        assert "try_get_simultaneous() to fall back\n" not in message + "\n"
        assert message.endswith(
            "growth after lock() is refused. Warm up this size before locking, or presize "
            f"with reserve_bytes(4096); a {kind} has no try_get_simultaneous() to fall back on"
        ), message


# ---------------------------------------------------------------------- events and logs
def test_listeners_hear_every_change_with_its_kind_slot_and_sizes() -> None:
    events: list[ArenaEvent] = []
    a = Arena("cpu", ubatches=2, framework="numpy")
    a.add_listener(events.append)
    a.reserve_bytes(1024)
    a.get_simultaneous(((1000,), F32))
    a.reserve_bytes(512)  # nothing to grow: no event
    a.lock()
    a.unlock()
    a.close()
    a.close()  # once only
    assert [(e.kind, e.slot, e.old_bytes, e.new_bytes) for e in events] == [
        ("resize", (0, 0), 0, 1024),
        ("resize", (1, 0), 0, 1024),
        ("resize", (0, 0), 1024, 4096),
        ("resize", (1, 0), 1024, 4096),
        ("lock", None, 0, 0),
        ("unlock", None, 0, 0),
        ("close", None, 0, 0),
    ]
    assert [e.sizes for e in events[-3:]] == [(4096, 4096), (4096, 4096), (0, 0)]


def test_the_debug_log_names_each_change_and_the_sizes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="arena"):
        a = Arena("cpu", framework="numpy", debug=True)
        a.reserve_bytes(1_234_688)  # 1.1775 MB
        a.lock()
        a.unlock()
        a.close()
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        re.search(r"resized slot \(ubatch 0, lane 0\) from '.*': 0\.00 MB -> ", x) for x in lines
    )
    assert sum(line.endswith(" locked. Current sizes (MB): [1.18]") for line in lines) == 1
    assert sum(line.endswith(" unlocked. Current sizes (MB): [1.18]") for line in lines) == 1
    assert any(line.endswith("closed arena on cpu") for line in lines)


def test_stats_report_the_device_state_and_cached_views() -> None:
    a = Arena("cpu", framework="numpy")
    a.get_simultaneous(((4,), F32), ((4,), "int8"))
    a.get_simultaneous(((4,), F32), ((4,), "int8"))
    stats = a.stats()
    assert (stats.device, stats.locked, stats.closed) == ("cpu", False, False)
    assert (stats.cached_layouts, stats.cached_views) == (1, 2)
    a.close()
    stats = a.stats()
    assert (stats.closed, stats.cached_layouts, stats.cached_views) == (True, 0, 0)


def test_the_memory_snapshot_names_what_every_block_was_for() -> None:
    source = FaultySource(fail_at={3})
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1000,), F32))
    a.get_persistent("kv", (16,), F32)
    with pytest.raises(ArenaOutOfMemoryError):
        a.get_simultaneous(((1 << 16,), F32))  # fails; the old size is restored
    trace = a.memory_snapshot()["device_traces"][0]
    names = [(e["action"], e["frames"][0]["name"] if e["frames"] else "") for e in trace]
    assert names == [
        ("segment_alloc", "the scratch buffer of slot (ubatch 0, lane 0)"),
        ("segment_alloc", "persistent buffer 'kv' of slot (ubatch 0, lane 0)"),
        ("segment_free", ""),
        ("oom", "the scratch buffer of slot (ubatch 0, lane 0)"),
        ("segment_alloc", "the restored scratch buffer of slot (ubatch 0, lane 0)"),
    ]
    oom = trace[3]
    assert (oom["addr"], oom["size"]) == (0, 262144)
    a.close()


def test_a_state_switch_used_as_a_bool_names_the_state_to_test() -> None:
    with Arena("cpu", framework="numpy") as a:
        for name in ("locked", "unlocked"):
            switch = getattr(a, name)
            with pytest.raises(TypeError) as info:
                bool(switch)
            assert str(info.value).startswith(f"ws.{name} is a context manager (with ws.{name}():")
            assert repr(switch) == f"<context manager factory ws.{name}()>"


def test_a_state_switch_called_and_tested_as_a_bool_names_the_state_to_test() -> None:
    # if ws.locked(): (vLLM's is_locked() misspelt) was always true and locked nothing.
    with Arena("cpu", framework="numpy") as a:
        for name in ("locked", "unlocked"):
            block = getattr(a, name)()
            with pytest.raises(TypeError) as info:
                bool(block)
            assert str(info.value) == (
                f"ws.{name}() is a context manager (with ws.{name}(): ...), not a state; to "
                "test whether the arena is locked use ws.is_locked (or vLLM's ws.is_locked())"
            )
            assert not a.is_locked  # making the block changed nothing
        with a.locked() as same:
            assert same is a and a.is_locked
            with a.unlocked():
                assert not a.is_locked
            assert a.is_locked
        assert not a.is_locked


def test_a_zero_init_persistent_buffer_is_zeroed_on_a_torch_owned_block() -> None:
    torch = pytest.importorskip("torch")

    class TorchOwned(RecordingSource):
        def allocate(self, nbytes: int) -> Allocation:
            tensor = torch.full((nbytes,), 0xA5, dtype=torch.uint8)
            self.events.append(("allocate", nbytes))
            self.live[tensor.data_ptr()] = nbytes
            return Allocation(tensor.data_ptr(), nbytes, tensor, self.device)

    source = TorchOwned()
    with Arena(source=source, framework="torch") as a:
        view = a.get_persistent("kv", (16,), torch.float32, zero_init=True)
        assert bool((view == 0).all())
        assert np.asarray(view).sum() == 0


def test_a_front_says_which_framework_and_arena_it_is_and_whether_it_is_cached() -> None:
    with Arena("cpu", framework="numpy") as a:
        assert repr(a.numpy) == f"<arena front 'numpy' of {a!r}>"
        assert repr(a.front("numpy", cached=True)) == f"<arena cached front 'numpy' of {a!r}>"


def test_a_front_whose_arena_was_collected_says_so_in_its_repr() -> None:
    # Arena(...).numpy printed "<arena front 'numpy' of None>" (found by a new user).
    front = Arena("cpu", framework="numpy").numpy
    gc.collect()
    assert repr(front) == "<arena front 'numpy' of a garbage-collected Arena, closed>"


def test_an_inference_fronts_repr_says_so_in_the_words_of_the_others() -> None:
    """Mutation Round 11: ``Front.__repr__`` #10 garbled the word, and the only check was
    that the repr holds "inference"."""
    pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as a:
        front = a.front("torch", cached=True, inference=True)
        assert repr(front) == f"<arena cached inference front 'torch' of {a!r}>"
        plain = a.front("torch", inference=True)
        assert repr(plain) == f"<arena inference front 'torch' of {a!r}>"


def test_where_a_view_starts_is_read_from_numpy_and_cupy_style_arrays() -> None:
    from arena.views.prepared import array_start, metadata

    base = np.zeros(64, np.uint8)
    view = base[16:32].view(np.float32)
    assert array_start(view) == base.ctypes.data + 16

    class Pointer:
        ptr = 12345

    class CupyLike:  # CuPy arrays have no __array_interface__: their start is data.ptr
        data = Pointer()
        shape = (4,)
        dtype = np.dtype("float32")
        strides = (4,)

    assert array_start(CupyLike()) == 12345
    assert metadata(CupyLike()) == ((4,), "float32", (4,), 12345, False)
    assert metadata(view) == ((4,), "float32", (4,), base.ctypes.data + 16, False)


def test_a_poisoned_arena_refusing_a_locked_request_returns_none() -> None:
    with Arena("cpu", framework="numpy", poison=True) as a:
        a.get_simultaneous(((16,), F32))
        a.lock()
        assert a.try_get_simultaneous(((4096,), F32)) is None
        (view,) = a.get_simultaneous(((16,), F32))
        assert np.isnan(view).all()


# ---------------------------------------------------------------------- profile messages
def _profile_error(**fields: object) -> str:
    from arena.observe.profileschema import ProfileError, check_profile

    data = profile_data({"growths": 0}, **fields)
    with pytest.raises(ProfileError) as info:
        check_profile(data)
    return str(info.value)


def test_a_profile_error_shows_the_value_found_shortened_to_sixty_characters() -> None:
    prefix = '"ubatches" must be an int from 1 to 2**63 - 1, found '
    exact = "x" * 58  # repr adds two quotes: 60 characters, shown whole
    assert _profile_error(ubatches=exact) == prefix + repr(exact)
    longer = "y" * 59
    assert _profile_error(ubatches=longer) == prefix + repr(longer)[:57] + "..."
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    assert _profile_error(ubatches=nested) == prefix + "<deeply nested list>"


def test_repairs_are_described_five_at_a_time_and_lines_kept_short() -> None:
    from arena.observe.profileschema import describe_repairs, one_line

    notes = [f"note {i}" for i in range(7)]
    assert describe_repairs(notes[:5]) == "note 0; note 1; note 2; note 3; note 4"
    assert describe_repairs(notes) == "note 0; note 1; note 2; note 3; note 4; and 2 more"
    assert describe_repairs(notes[:6]) == "note 0; note 1; note 2; note 3; note 4; and 1 more"
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("z" * 200) == "z" * 200
    assert one_line("z" * 201) == "z" * 197 + "..."


def _valid_profile() -> dict[str, object]:
    site = {
        "site": "a.py:1:f",
        "ubatch": 0,
        "lane": 0,
        "peak": 256,
        "layouts": [{"total": 256, "padding": 216, "views": [[[10], "float32"]]}],
    }
    return profile_data({"growths": 0}, growth="exact", sites=[site])


BIG = 2**64
REPAIRS: list[tuple[str, Any, list[str], Any]] = [
    ("growth", lambda p: p.update(growth=5), ['"growth" 5 is not a string: dropped'], None),
    ("updated", lambda p: p.update(updated=[1]), ['"updated" [1] is not a string: dropped'], None),
    (
        "runs too large",
        lambda p: p.update(runs=BIG),
        [f'"runs" {BIG} clamped to 2**63 - 1'],
        ("runs", 2**63 - 1),
    ),
    (
        "runs not a count",
        lambda p: p.update(runs="x"),
        ["\"runs\" must be an int from 0 to 2**63 - 1, found 'x': counted from 0"],
        ("runs", 0),
    ),
    (
        "slot figure too large",
        lambda p: p["slots"][0].update(peak=BIG),
        [f"slot #0 'peak' {BIG} clamped to 2**63 - 1"],
        None,
    ),
    (
        "slot figure not a count",
        lambda p: p["slots"][0].update(growths=-1),
        ["slot #0 'growths' must be an int from 0 to 2**63 - 1, found -1: counted from 0"],
        None,
    ),
    (
        "site not an object",
        lambda p: p.update(sites=[5]),
        ["call site #0 must be an object, found 5: dropped"],
        ("sites", []),
    ),
    (
        "sites not a list",
        lambda p: p.update(sites=5),
        ['"sites" must be a list, found 5: dropped'],
        ("sites", []),
    ),
    (
        "site peak too large",
        lambda p: p["sites"][0].update(peak=BIG),
        [f"call site #0 'peak' {BIG} clamped to 2**63 - 1"],
        None,
    ),
    (
        "layout not an object",
        lambda p: p["sites"][0]["layouts"].append(7),
        ["call site #0 layout #1 must be an object, found 7: dropped"],
        None,
    ),
    (
        "layout sizes too large",
        lambda p: p["sites"][0]["layouts"][0].update(total=BIG, padding=BIG),
        [
            f"call site #0 layout #0 'total' {BIG} clamped to 2**63 - 1",
            f"call site #0 layout #0 'padding' {BIG} clamped to 2**63 - 1",
        ],
        None,
    ),
    ("no timeline", lambda p: p.pop("timeline"), [], ("timeline", [])),
    (
        "load and planned",
        lambda p: p["slots"][0].update(load=BIG, planned="x"),
        [
            f"slot #0 'load' {BIG} clamped to 2**63 - 1",
            "slot #0 'planned' must be an int from 0 to 2**63 - 1, found 'x': counted from 0",
        ],
        None,
    ),
    (
        "rank not an int",
        lambda p: p.update(ranks=[0, "1", True]),
        [
            "\"ranks\" #1 must be an int, found '1': dropped",
            '"ranks" #2 must be an int, found True: dropped',
        ],
        ("ranks", [0]),
    ),
    (
        "timeline sizes too large",
        lambda p: p.update(
            timeline=[
                {
                    "t": 0.5,
                    "ubatch": 0,
                    "lane": 0,
                    "old": BIG,
                    "new": BIG,
                    "caller": "c",
                    "kind": "grow",
                }
            ]
        ),
        [
            f"timeline entry #0 'old' {BIG} clamped to 2**63 - 1",
            f"timeline entry #0 'new' {BIG} clamped to 2**63 - 1",
        ],
        None,
    ),
    (
        "workspaces",
        lambda p: p.update(
            workspaces=[
                {"ubatch": 0, "lane": 0, "kind": "library", "key": "cublas", "bytes": BIG},
                {"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 64},
                {"ubatch": 0, "lane": 0, "kind": "library", "key": 7, "bytes": 64},
                5,
                {"ubatch": 1, "lane": 0, "kind": "library", "key": "k", "bytes": 1},
                {"ubatch": 0, "lane": 1, "kind": "library", "key": "k", "bytes": 1},
                {"ubatch": 0, "lane": 0, "kind": "library", "key": "k", "bytes": -1},
                {"ubatch": 0, "lane": 0, "kind": "cuda", "key": "k", "bytes": 1},
                {"ubatch": 0, "lane": 0, "kind": "triton", "key": "k", "bytes": 1},
                {"ubatch": 0, "lane": 0, "kind": "library", "key": True, "bytes": 1},
                {"ubatch": 0, "lane": 0, "kind": "library", "key": 1.5, "bytes": 1},
            ]
        ),
        [
            f"workspace #0 'bytes' {BIG} clamped to 2**63 - 1",
            "workspace #3 must be an object, found 5: dropped",
            "workspace #4 'ubatch' is 1, but the profile has 1 ubatches (0 to 0): dropped",
            "workspace #5 'lane' is 1, but the profile has 1 lanes (0 to 0): dropped",
            "workspace #6 'bytes' must be an int from 0 to 2**63 - 1, found -1: dropped",
            "workspace #7 'kind' must be 'library' or 'triton', found 'cuda': dropped",
            "workspace #8 'key' must be null for Triton blocks, found 'k': dropped",
            "workspace #9 'key' must be a string or an int, found True: dropped",
            "workspace #10 'key' must be a string or an int, found 1.5: dropped",
        ],
        None,
    ),
]


@pytest.mark.parametrize(("case", "damage", "notes", "field"), REPAIRS, ids=[r[0] for r in REPAIRS])
def test_a_repaired_profile_says_exactly_what_was_repaired(
    case: str, damage: Any, notes: list[str], field: Any
) -> None:
    from arena.observe.profileschema import check_profile, salvage_profile

    data = _valid_profile()
    damage(data)
    repaired, found = salvage_profile(data)
    assert found == notes
    check_profile(repaired)
    if field is not None:
        assert repaired[field[0]] == field[1]
    if case in ("growth", "updated"):
        assert case not in repaired
    if case == "workspaces":
        assert [w["bytes"] for w in repaired["workspaces"]] == [2**63 - 1, 64, 64]
    if case == "layout not an object":
        assert len(repaired["sites"][0]["layouts"]) == 1
    if case.startswith(("slot figure", "site peak", "layout sizes")):
        figures = [*repaired["slots"][0].values(), repaired["sites"][0]["peak"]]
        figures += list(repaired["sites"][0]["layouts"][0].values())[:2]
        assert all(not isinstance(v, int) or v <= 2**63 - 1 for v in figures)


def test_a_slot_shrunk_by_step_planning_is_announced_as_a_resize() -> None:
    events: list[ArenaEvent] = []
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("s") as st:  # record a first-fit order that wastes bytes
            (a,) = st.get_simultaneous(((100,), F32))
            (b,) = st.get_simultaneous(((1000,), F32))
            st.release(a)
            st.get_simultaneous(((200,), F32))
            st.release(b)
            st.get_simultaneous(((1000,), F32))
        recorded = ws.stats().slots[0].capacity
        ws.add_listener(events.append)
        with ws.step("s"):  # the second run plans the step and shrinks the slot
            planned = ws.stats().slots[0].capacity
    assert planned < recorded
    assert [(e.kind, e.slot, e.old_bytes, e.new_bytes) for e in events] == [
        ("resize", (0, 0), recorded, planned),
        ("close", None, 0, 0),
    ]


def _record_wasteful_step(ws: Arena, scale: int) -> None:
    with ws.step("s") as st:  # a first-fit order that wastes bytes
        (a,) = st.get_simultaneous(((100 * scale,), F32))
        (b,) = st.get_simultaneous(((1000 * scale,), F32))
        st.release(a)
        st.get_simultaneous(((200 * scale,), F32))
        st.release(b)
        st.get_simultaneous(((1000 * scale,), F32))


def test_planning_steps_announces_each_shrink_and_plans_the_largest_need() -> None:
    events: list[ArenaEvent] = []
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        _record_wasteful_step(ws, 2)
        with ws.ubatch(1):
            _record_wasteful_step(ws, 1)
        recorded = [s.capacity for s in ws.stats().slots]
        growths = ws.stats().growths
        ws.add_listener(events.append)
        planned = ws.plan_steps()
        after = [s.capacity for s in ws.stats().slots]
        assert ws.stats().growths == growths  # a shrink is no growth
    assert planned == {"s": max(after)}
    assert [(e.kind, e.slot, e.old_bytes, e.new_bytes) for e in events] == [
        ("resize", (0, 0), recorded[0], after[0]),
        ("resize", (1, 0), recorded[1], after[1]),
        ("close", None, 0, 0),
    ]


@pytest.mark.parametrize(
    ("module", "front"),
    [("cupy._core.core", "cupy"), ("jaxlib.xla_extension", "jax"), ("torch", "torch")],
)
def test_an_array_of_another_framework_is_sent_to_that_frameworks_front(
    module: str, front: str
) -> None:
    """``data_ptr`` given another framework's array names that framework's front, JAX's
    arrays by their ``jaxlib`` module too (Round 11: ``Front.data_ptr`` #15, #30)."""
    foreign = type("ndarray", (), {"__module__": module})()
    refused = pytest.raises(DTypeError, match=rf"call ws\.{front}\.data_ptr or ws\.{front}\.")
    with Arena("cpu", framework="numpy") as a, refused:
        a.numpy.data_ptr(foreign)
