"""Gaps in the tests of the facade (``arena/core.py``, ``config.py``, ``process.py``),
found by Round 14c of mutation testing (``scripts/mutation facade``, docs/testing.md):
each test names the mutants it kills."""

from __future__ import annotations

import gc
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import arena
from arena import ConfigError
from arena import process as process_module
from arena.config import pick_framework
from arena.memory.devices import parse_device
from arena.observe.profilefile import read_profile


class _OneRank:
    """A process group of one rank (the duck-typed ``SyncGroup``): every collective
    answers with this rank's own values, and each call is recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def all_reduce_max(self, values: list[int]) -> list[int]:
        self.calls.append("all_reduce_max")
        return list(values)

    def all_gather(self, data: bytes) -> list[bytes]:
        self.calls.append("all_gather")
        return [data]


def test_lock_over_a_group_syncs_with_it_first() -> None:
    """``Arena.lock`` #9 (``sync_table(group)``: the table left out, a TypeError for
    every ``lock(group=...)``)."""
    group = _OneRank()
    with arena.Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((100,), "uint8"))
        ws.lock(group=group)
        assert ws.is_locked
        assert "all_reduce_max" in group.calls  # the sizes agreed over the group


def _dropped_in_a_cycle(path: Path) -> None:
    """An arena whose resolver refers to it (a reference cycle through the arena, as an
    engine's listener or resolver makes), served once and dropped without ``close()``."""
    box: dict[str, Any] = {}
    ws = arena.Arena(
        "cpu", framework="numpy", profile=path, ubatches=2, ubatch_resolver=lambda: box["n"]
    )
    box.update(n=0, ws=ws)
    ws.get_simultaneous(((1000,), "float32"))
    assert not path.exists()


def test_an_arena_collected_in_a_cycle_without_close_saves_its_profile(tmp_path: Path) -> None:
    """``Arena.__init__`` #78 (the recorder not handed to ``close_when_collected``): an arena
    collected with its table (a cycle) closes no table, so nothing announces the close that
    saves the profile; only the recorder's own finalizer saves what the arena recorded."""
    path = tmp_path / "profile.json"
    _dropped_in_a_cycle(path)
    gc.collect()
    assert read_profile(path)["slots"][0]["peak"] == 4096


@pytest.mark.parametrize(
    ("name", "returns"),
    [
        ("ubatch_resolver", "an int"),
        ("lane_resolver", "an int"),
        ("alloc_context", "a context manager"),
        ("capture_probe", "a bool"),
    ],
)
def test_a_hook_that_is_not_callable_is_named(name: str, returns: str) -> None:
    """``settings`` #39 (``alloc_context`` named ``ALLOC_CONTEXT`` in its error)."""
    with pytest.raises(ConfigError) as caught:
        arena.Arena("cpu", framework="numpy", **{name: 5})
    assert str(caught.value) == f"{name} must be a callable returning {returns}, got 5"


def test_the_host_without_torch_imported_defaults_to_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pick_framework`` #36 (``if device.is_cuda``: the host given CuPy, or torch, where
    torch is not imported; the other tests import torch first)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert pick_framework(None, parse_device("cpu")) == "numpy"


@pytest.mark.parametrize(("cupy", "expected"), [(True, "cupy"), (False, "torch")])
def test_a_gpu_without_torch_imported_defaults_to_cupy_where_it_is_installed(
    monkeypatch: pytest.MonkeyPatch, cupy: bool, expected: str
) -> None:
    """``pick_framework`` #36 (a GPU given NumPy) and #44 (CuPy looked up by another name:
    torch chosen on a GPU where CuPy is installed)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    find_spec = importlib.util.find_spec

    def installed(name: str, *args: Any) -> Any:
        if name == "cupy":
            return object() if cupy else None
        return find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", installed)
    assert pick_framework(None, parse_device("cuda:1")) == expected


class _StandIn:
    """Stands in for ``Arena`` in the process-wide registry: records its device and its
    close, needs no GPU for a CUDA device."""

    def __init__(self, device: Any, **options: Any) -> None:
        self.device = device
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_reset_arena_closes_only_the_named_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reset_arena`` #1 (``all_devices=True`` by default: every device's arena closed)
    and #8 (``_key(None)``: the default device's arena closed, here the host's, in place
    of the one named)."""
    monkeypatch.setattr(process_module, "Arena", _StandIn)
    try:
        host = arena.init_arena("cpu")
        gpu = arena.init_arena("cuda:1")
        arena.reset_arena("cuda:1")
        assert gpu.closed and not host.closed  # type: ignore[attr-defined]
        assert arena.is_arena_initialized("cpu")
        assert not arena.is_arena_initialized("cuda:1")
        arena.reset_arena("cpu")
        assert host.closed  # type: ignore[attr-defined]
        assert not arena.is_arena_initialized("cpu")
    finally:
        arena.reset_arena(all_devices=True)
