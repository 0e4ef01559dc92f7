"""Gaps in the tests of the facade's settings, repr, errors and process-wide arenas
(``arena/config.py``, ``arena/assembly.py``, ``arena/errors.py``, ``arena/process.py``),
found by Round 12a of mutation testing (``scripts/mutation facade``, docs/testing.md):
each test names the mutants it kills."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from arena import Arena, config, process
from arena.config import parse_bytes
from arena.errors import (
    ArenaAsleepError,
    ArenaLockedError,
    ArenaWarning,
    ConfigError,
    NotInitializedError,
)
from arena.memory.devices import Device, parse_device
from arena.process import (
    current_arena,
    init_arena,
    is_arena_initialized,
    lock_arena,
    reset_arena,
    unlock_arena,
)
from tests.sources import RecordingSource

MB = 1 << 20


def test_the_repr_names_each_state_and_the_slot_sizes() -> None:
    """``describe_arena`` #5, #10 (a state's word changed), #15 (``asleep`` replacing the
    state instead of following it), #17 (the sizes left out)."""
    a = Arena("cpu", source="virtual", framework="numpy", name="eng")
    head = "Arena(device='cpu', ubatches=1, lanes=1, alignment=256, framework='numpy', name='eng'"
    a.get_simultaneous(((MB,), "uint8"))
    assert repr(a) == f"{head}, unlocked, slots=[1.00 MB])"
    a.lock()
    assert repr(a) == f"{head}, locked, slots=[1.00 MB])"
    a.unlock()
    a.sleep(1)
    assert repr(a) == f"{head}, unlocked, asleep (level 1), slots=[1.00 MB])"
    a.wake()
    a.close()
    assert repr(a) == f"{head}, closed, slots=[0.00 MB])"
    b = Arena("cpu", framework="numpy", lanes=2)
    assert repr(b) == (
        "Arena(device='cpu', ubatches=1, lanes=2, alignment=256, framework='numpy', "
        "unlocked, slots=[0.00 MB, 0.00 MB])"
    )
    b.close()


def test_more_slots_than_an_arena_holds_counts_ubatches_times_lanes() -> None:
    """``settings`` #16 (``ubatches / lanes``: 2048 x 4 slots passed as 512)."""
    with pytest.raises(ConfigError, match=r"ubatches=2048 x lanes=4 makes 8192 slots"):
        Arena("cpu", ubatches=2048, lanes=4)
    Arena("cpu", ubatches=1024, lanes=4).close()  # 4096: the most


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        # settings #69: the flag's name left out of its error
        (
            {"inference_views": "yes"},
            "inference_views must be True or False, got str 'yes'; pass inference_views=True "
            "(a string such as 'false' is not a bool)",
        ),
        # check_framework #26: a framework that is not a str stripped (AttributeError)
        ({"framework": 3}, "unknown framework 3; choose one of numpy, torch, cupy, jax"),
        # check_path #8: the example name built with replace('_', None) (TypeError)
        (
            {"event_log": 3},
            "event_log must be a file path (str or os.PathLike), got int 3; "
            "pass e.g. event_log='arena-event-log'",
        ),
        # make_source #8: the error without its message
        (
            {"source": object()},
            "source must provide device, allocate(nbytes) and release(allocation), or RMM's "
            "allocate(nbytes, stream) and deallocate(ptr, nbytes, stream); got object",
        ),
    ],
)
def test_a_bad_argument_is_a_config_error_that_names_it(
    keywords: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Arena("cpu", **keywords)
    assert str(caught.value) == message


def test_a_byte_count_with_leading_zeros_is_its_value() -> None:
    """``parse_bytes`` #7 (``lstrip(None)``: the zeros kept, so 28 digits taken for a
    count past the limit)."""
    assert parse_bytes("max_bytes", "0" * 24 + "4096") == 4096
    assert parse_bytes("max_bytes", "0" * 30 + "1 KiB") == 1024


def test_a_byte_count_that_is_not_one_says_why_only_where_a_unit_is_ambiguous() -> None:
    """``parse_bytes`` #40 (the reason text set where there is none)."""
    with pytest.raises(ConfigError) as caught:
        parse_bytes("max_bytes", "abc")
    assert str(caught.value).endswith("units KiB, MiB, GiB, TiB), got 'abc'")
    with pytest.raises(ConfigError, match=r"'MB' is ambiguous"):
        parse_bytes("max_bytes", "4 MB")


def test_the_errors_defaults_say_no_call_site_or_an_unknown_one() -> None:
    """``ArenaAsleepError.__init__`` #1, ``ArenaLockedError.__init__`` #1, #2 (the default
    call sites reworded)."""
    assert ArenaAsleepError("asleep").caller == ""
    assert ArenaLockedError("locked").caller == "<unknown>"


def test_a_request_while_asleep_names_its_call_site() -> None:
    """``ArenaAsleepError.__init__`` #3 (the call site given dropped)."""
    a = Arena("cpu", source="virtual", framework="numpy")
    a.sleep(1)
    with pytest.raises(ArenaAsleepError) as caught:
        a.get_simultaneous(((4,), "uint8"))
    site = caught.value.caller
    assert site.startswith("test_facade_gaps12.py:")
    assert site.endswith(":test_a_request_while_asleep_names_its_call_site")
    a.wake()
    a.close()


@pytest.fixture
def no_process_arenas() -> Iterator[None]:
    """No process-wide arena before the test (another test's would be replaced, with a
    warning) nor after it."""
    reset_arena(all_devices=True)
    yield
    reset_arena(all_devices=True)


@pytest.fixture
def gpu_by_default(monkeypatch: pytest.MonkeyPatch, no_process_arenas: None) -> None:
    """A machine whose default device is a GPU (none is used: the arenas are on 'cpu')."""
    cuda = parse_device("cuda:0")
    monkeypatch.setattr(config, "default_device", lambda: cuda)
    monkeypatch.setattr(process, "default_device", lambda: cuda)


@pytest.mark.usefixtures("gpu_by_default")
def test_the_process_arena_of_a_device_given_is_that_devices() -> None:
    """``init_arena`` #5 (the device given left out: the default device's arena made),
    ``current_arena`` #2, ``lock_arena`` #1, ``unlock_arena`` #1 (the default device's
    arena asked for)."""
    made = init_arena("cpu", framework="numpy")
    assert made.device.kind == "cpu"
    assert current_arena("cpu") is made
    lock_arena("cpu")
    assert made.is_locked
    unlock_arena("cpu")
    assert not made.is_locked
    assert current_arena() is made  # the default device (cuda:0) has none: the only one
    with pytest.raises(NotInitializedError, match=r"no process-wide arena on cuda:0"):
        current_arena("cuda:0")
    on_default = init_arena(
        "cuda:0", source=_LabelledCuda(), framework="torch", capture_probe=lambda: False
    )
    assert current_arena() is on_default  # the default device's, now it has one
    lock_arena()
    assert on_default.is_locked and not made.is_locked


@pytest.mark.usefixtures("gpu_by_default")
def test_beside_the_default_devices_arena_a_device_given_locks_and_unlocks_its_own() -> None:
    """``lock_arena`` #1, ``unlock_arena`` #1 (the device given left out), Round 18a:
    since ``current_arena()`` finds the only arena where the default device has none, the
    test above tells them apart only once the default device has an arena too."""
    on_host = init_arena("cpu", framework="numpy")
    on_default = init_arena(
        "cuda:0", source=_LabelledCuda(), framework="torch", capture_probe=lambda: False
    )
    lock_arena("cpu")
    assert on_host.is_locked and not on_default.is_locked
    lock_arena()
    unlock_arena("cpu")
    assert not on_host.is_locked and on_default.is_locked


@pytest.mark.usefixtures("no_process_arenas")
def test_init_arena_called_again_names_the_device() -> None:
    """``init_arena`` #15 (``str(None)``: the warning named ``init_arena('None')``),
    Round 18a."""
    init_arena("host", framework="numpy")
    with pytest.warns(ArenaWarning, match=r"^init_arena\('cpu'\) called again: the previous"):
        init_arena("cpu", framework="numpy")


@pytest.mark.usefixtures("no_process_arenas")
def test_without_a_device_two_arenas_none_on_the_default_device_are_not_guessed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``current_arena()`` stands in the only arena for the default device's; with two
    and neither on the default device, it names the default device and both."""
    monkeypatch.setattr(process, "default_device", lambda: parse_device("cuda:1"))
    init_arena("cpu", framework="numpy")
    init_arena("cuda:0", source=_LabelledCuda(), framework="torch", capture_probe=lambda: False)
    with pytest.raises(NotInitializedError) as caught:
        current_arena()
    assert str(caught.value) == (
        "no process-wide arena on cuda:1 (initialised: cpu, cuda:0); call "
        "arena.init_arena('cuda:1') first"
    )
    assert not is_arena_initialized()


@pytest.mark.usefixtures("no_process_arenas")
def test_init_arena_called_again_warns_at_the_callers_line() -> None:
    """``init_arena`` #14 (``stacklevel`` dropped: the warning named process.py)."""
    init_arena("cpu", framework="numpy")
    with pytest.warns(ArenaWarning, match=r"called again") as caught:
        init_arena("cpu", framework="numpy")
    assert caught[0].filename == __file__


class _LabelledCuda(RecordingSource):
    """A host source that says it is CUDA device 0 (nothing is allocated from it): a
    second device's process-wide arena on a machine without one."""

    @property
    def device(self) -> Device:
        return parse_device("cuda:0")


@pytest.mark.usefixtures("no_process_arenas")
def test_an_arena_not_initialised_lists_every_device_that_has_one() -> None:
    """``current_arena`` #8 (the devices joined with ``"XX, XX"``)."""
    init_arena("cpu", framework="numpy")
    init_arena("cuda:0", source=_LabelledCuda(), framework="torch", capture_probe=lambda: False)
    with pytest.raises(NotInitializedError) as caught:
        current_arena("cuda:1")
    assert str(caught.value) == (
        "no process-wide arena on cuda:1 (initialised: cpu, cuda:0); call "
        "arena.init_arena('cuda:1') first"
    )
