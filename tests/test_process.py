from __future__ import annotations

from typing import Any

import pytest

import arena
from arena import ArenaWarning, NotInitializedError


def test_process_wide_lifecycle() -> None:
    assert not arena.is_arena_initialized("cpu")
    a = arena.init_arena("cpu", framework="numpy", ubatches=2)
    assert arena.is_arena_initialized("cpu")
    assert arena.current_arena("cpu") is a
    assert arena.current_arena("host") is a  # spellings of one device share one arena
    arena.lock_arena("cpu")
    assert a.is_locked
    arena.unlock_arena("cpu")
    assert not a.is_locked
    arena.reset_arena("cpu")
    assert not arena.is_arena_initialized("cpu")
    assert a.is_closed


def test_default_device_is_host_without_a_gpu() -> None:
    if arena.default_device().is_cuda:
        pytest.skip("a GPU is visible: the default device is CUDA here")
    a = arena.init_arena(framework="numpy")
    assert arena.current_arena() is a and arena.current_arena("cpu") is a
    assert str(a.device) == "cpu"


def test_reinitialising_warns_closes_the_old_arena_and_keeps_views() -> None:
    old = arena.init_arena("cpu", framework="numpy")
    (view,) = old.get_simultaneous(((4,), "float32"))
    view[:] = 1
    with pytest.warns(ArenaWarning, match="called again"):
        new = arena.init_arena("cpu", framework="numpy")
    assert new is not old and old.is_closed
    assert arena.current_arena("cpu") is new
    assert view.tolist() == [1, 1, 1, 1]


def test_uninitialised_errors_name_the_fix() -> None:
    with pytest.raises(NotInitializedError, match=r"init_arena\('cpu'\)"):
        arena.current_arena("cpu")
    with pytest.raises(NotInitializedError):
        arena.unlock_arena("cpu")
    arena.reset_arena("cpu")  # resetting nothing is fine


def test_reset_all_devices() -> None:
    a = arena.init_arena("cpu", framework="numpy")
    arena.reset_arena(all_devices=True)
    assert a.is_closed and not arena.is_arena_initialized("cpu")


def test_device_parsing() -> None:
    from arena import Device, parse_device

    assert parse_device("cuda:2") == Device("cuda", 2)
    assert parse_device(1) == Device("cuda", 1)
    assert parse_device(" CPU ") == arena.CPU
    torch = pytest.importorskip("torch")
    assert parse_device(torch.device("cuda", 3)) == Device("cuda", 3)
    assert parse_device(torch.device("cpu")) == arena.CPU


def test_without_a_device_the_only_arena_is_found_where_the_default_device_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a machine with a GPU the default device is CUDA; a process that initialised only
    a host arena (as docs/distributed.md's ranks do) finds it with ``current_arena()``.
    The first GPU run failed there: "no process-wide arena on cuda:0 (initialised: cpu)"."""
    from arena import process

    monkeypatch.setattr(process, "default_device", lambda: arena.Device("cuda", 0))
    assert not arena.is_arena_initialized()
    with pytest.raises(NotInitializedError, match=r"cuda:0 \(initialised: none\)"):
        arena.current_arena()
    a = arena.init_arena("cpu", framework="numpy")
    assert arena.is_arena_initialized() and arena.current_arena() is a
    arena.lock_arena()
    assert a.is_locked
    arena.unlock_arena()
    assert not a.is_locked
    # a device named is that device: no stand-in
    assert not arena.is_arena_initialized("cuda:0")
    with pytest.raises(NotInitializedError, match=r"cuda:0 \(initialised: cpu\)"):
        arena.current_arena("cuda:0")
    arena.reset_arena()
    assert a.is_closed and not arena.is_arena_initialized("cpu")


def test_the_reinitialising_warning_names_the_device() -> None:
    """Round 18c (process.py ``init_arena`` #15: the warning read ``init_arena('None')``)."""
    arena.init_arena("cpu", framework="numpy")
    with pytest.warns(ArenaWarning, match=r"^init_arena\('cpu'\) called again"):
        arena.init_arena("host", framework="numpy")


def test_resetting_a_device_without_an_arena_leaves_the_only_arena() -> None:
    """Round 18c (``reset_arena`` #13, ``_found(None, key)``): the only-arena stand-in is for
    no device named; ``reset_arena("cuda:0")`` closed the host arena, the only one."""
    a = arena.init_arena("cpu", framework="numpy")
    arena.reset_arena("cuda:0")
    assert not a.is_closed and arena.current_arena("cpu") is a


class _StandIn:
    """Stands in for ``Arena`` in the registry: a CUDA device's arena without a GPU."""

    def __init__(self, device: Any, **options: Any) -> None:
        self.device = device
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_reset_all_devices_closes_every_devices_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 18c (``reset_arena`` #3, ``all_devices`` ignored: the default device's arena,
    or the only one, was closed and the others kept)."""
    from arena import process

    monkeypatch.setattr(process, "Arena", _StandIn)
    host = arena.init_arena("cpu")
    gpu = arena.init_arena("cuda:1")
    arena.reset_arena(all_devices=True)
    assert host.closed and gpu.closed  # type: ignore[attr-defined]
    assert not arena.is_arena_initialized("cpu") and not arena.is_arena_initialized("cuda:1")


def test_an_init_arena_another_thread_ran_meanwhile_is_closed_by_the_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # planted49: init_arena reading the previous arena before taking the registry lock
    # (check-then-act) passed every test naming init_arena: another thread's whole
    # init_arena between the read and the store left that thread's arena open and
    # unregistered, never closed, without the warning. Here the other call runs right
    # as this one takes the lock (a thread switch can land there on either code).
    from arena import process

    real = process._registry_lock
    others: list[Any] = []

    class Interleaved:
        def __enter__(self) -> bool:
            if not others:
                others.append(None)
                others[0] = arena.init_arena("cpu", framework="numpy")  # the other thread's
            return real.__enter__()

        def __exit__(self, *exc: Any) -> None:
            real.__exit__(*exc)

    monkeypatch.setattr(process, "_registry_lock", Interleaved())
    with pytest.warns(ArenaWarning, match="called again"):
        mine = arena.init_arena("cpu", framework="numpy")
    assert others[0].is_closed and not mine.is_closed
    assert arena.current_arena("cpu") is mine
    arena.reset_arena(all_devices=True)
