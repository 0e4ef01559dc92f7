"""Errors that named too little (issue 26 item 12, small46).

* ``Arena("gpu")`` on a machine without a usable GPU said "cuda:0 is not available ...",
  not naming "gpu", what the caller typed: the message now names it next to the device it
  was read as, keeping its fix (``device='cpu'``, or what to install).
* ``Arena(ubatches=0)`` said "ubatches must be an int >= 1, got 0" and no fix: it now says
  what to pass. So do ``lanes`` and ``max_cached_layouts``, refused by the same check.

The negative text ordinal (``"cuda:-1"``): tests/memory/test_small46_devices.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

import arena
from arena import CPU, Arena, ArenaClosedError, ConfigError, DeviceUnavailableError, config
from arena.errors import ArenaError
from arena.memory import devices
from tests.memory.test_cuda_fakes import fake_cupy, fake_torch, install


@pytest.fixture(autouse=True)
def _fresh_device_counts() -> Iterator[None]:
    devices.forget_device_counts()  # a stand-in's counts are neither seen nor left behind
    yield
    devices.forget_device_counts()


def _host(**options: Any) -> arena.Arena:
    return arena.Arena("cpu", framework="numpy", profile=False, **options)


# ---------------------------------------------------------------- ubatches, lanes
@pytest.mark.parametrize(
    ("name", "value"),
    [("ubatches", 0), ("ubatches", -3), ("lanes", 0), ("max_cached_layouts", 0)],
)
def test_a_count_below_one_is_refused_naming_the_value_and_what_to_pass(
    name: str, value: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        _host(**{name: value})
    assert str(caught.value) == (
        f"{name} must be an int >= 1, got {value}; pass an int of 1 or more, e.g. {name}=1"
    )
    assert isinstance(caught.value, ValueError)


def test_a_count_of_another_type_is_told_the_same_fix() -> None:
    with pytest.raises(ConfigError) as caught:
        _host(ubatches="2")
    assert str(caught.value) == (
        "ubatches must be an int >= 1, got '2'; pass an int of 1 or more, e.g. ubatches=1"
    )


def test_a_numpy_count_keeps_the_plain_int_fix_alone() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(ConfigError) as caught:
        _host(ubatches=np.int64(0))
    message = str(caught.value)
    assert message.endswith("(int64 is not a Python int: pass int(...) of it, 0)")
    assert "e.g. ubatches=1" not in message


# ---------------------------------------------------------------- the caller's spelling
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, cupy=fake_cupy(count=0), torch=None)


@pytest.mark.parametrize(
    ("device", "shown"),
    [("gpu", "'gpu'"), (" GPU ", "' GPU '"), ("cuda", "'cuda'"), (0, "0"), ("gpu:1", "'gpu:1'")],
)
def test_a_missing_gpu_is_refused_naming_the_callers_spelling_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, device: Any, shown: str
) -> None:
    _no_gpu(monkeypatch)
    with pytest.raises(DeviceUnavailableError) as caught:
        arena.Arena(device, framework="numpy", profile=False)
    message = str(caught.value)
    resolved = devices.parse_device(device)
    assert message.startswith(f"{resolved} (device={shown}) is not available: CuPy sees 0 ")
    assert message.endswith("; use device='cpu' for a host arena")
    assert isinstance(caught.value, ArenaError) and isinstance(caught.value, RuntimeError)
    assert isinstance(caught.value.__cause__, DeviceUnavailableError)  # the source's own
    assert str(caught.value.__cause__).startswith(f"{resolved} is not available")


@pytest.mark.parametrize("device", ["cuda:0", arena.Device("cuda", 0)])
def test_a_device_spelled_as_it_prints_is_named_once(
    monkeypatch: pytest.MonkeyPatch, device: Any
) -> None:
    _no_gpu(monkeypatch)
    with pytest.raises(DeviceUnavailableError) as caught:
        arena.Arena(device, framework="numpy", profile=False)
    assert str(caught.value).startswith("cuda:0 is not available: CuPy sees 0 CUDA device(s)")
    assert caught.value.__cause__ is None


def test_a_named_source_names_the_spelling_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, cupy=None, torch=fake_torch(count=1))
    with pytest.raises(DeviceUnavailableError) as caught:
        arena.Arena("gpu", framework="numpy", profile=False, source="device")
    assert str(caught.value).startswith("a cuda:0 (device='gpu') arena with this source needs")
    with pytest.raises(DeviceUnavailableError) as caught:
        arena.Arena("gpu:1", framework="numpy", profile=False, source="torch")
    assert str(caught.value).startswith(
        "cuda:1 (device='gpu:1') is not available to torch: torch sees 1 CUDA device(s)"
    )


def test_a_host_arena_without_a_gpu_keeps_its_pinned_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_gpu(monkeypatch)
    with pytest.raises(DeviceUnavailableError) as caught:
        arena.Arena("host", framework="numpy", profile=False, source="pinned")
    assert "(device=" not in str(caught.value)
    assert str(caught.value).endswith("(Arena('cpu'), source='host')")


# ---------------------------------------------------------------- Round 16a's survivors
def test_a_long_value_is_shown_as_its_first_45_characters_and_its_length() -> None:
    value = "x" * 100  # repr: 102 characters
    with pytest.raises(ConfigError) as caught:
        config.parse_bytes("max_bytes", value)
    assert f"got {repr(value)[:45]}... (102 characters)" in str(caught.value)


def test_an_adapter_is_the_plain_one_unless_inference_is_asked() -> None:
    pytest.importorskip("torch")
    plain = importlib.import_module("arena.adapters.torch").ADAPTER
    assert config.load_adapter("torch", CPU) is plain  # the triton workspaces' call
    assert config.load_adapter("torch", CPU, True) is not plain


class _CudaSource:
    """A source that says its memory is on cuda:0 and is never asked for any."""

    device = arena.Device("cuda", 0)

    def allocate(self, nbytes: int) -> Any:
        raise AssertionError("not called")

    def release(self, allocation: Any) -> None:
        raise AssertionError("not called")


def _settings(capture_probe: Any) -> config.Settings:
    return config.settings(
        None,
        ubatches=1,
        lanes=1,
        alignment=256,
        growth="exact",
        source=_CudaSource(),
        ubatch_resolver=None,
        lane_resolver=None,
        alloc_context=None,
        debug=False,
        max_cached_layouts=8,
        cached_views=True,
        track_call_sites=False,
        capture_probe=capture_probe,
        poison=False,
    )


def test_a_cuda_arena_gets_the_capture_probe_only_where_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_gpu(monkeypatch)

    def given() -> bool:
        return False

    assert _settings(given).capture_probe is given
    made = _settings(None).capture_probe
    assert callable(made) and made is not given


def test_entering_a_closed_arena_is_refused() -> None:
    """``with ws:`` after ``ws.close()`` entered quietly and only the first request inside
    raised (found following the README as a new user); a closed file refuses ``with``."""
    ws = Arena("cpu", framework="numpy")
    with ws:
        ws.numpy.get_simultaneous(((4,), "float32"))
    with pytest.raises(ArenaClosedError, match="is closed"), ws:
        pass
    assert ws.is_closed
