"""Hostile review (hostile41) of the profile lock, :func:`arena.observe.files.exclusive`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from arena.observe import files


def test_an_interrupt_right_after_the_lock_file_is_opened_leaves_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that arrives while ``os.open`` creates the lock file is handled when the
    call returns, before its descriptor is stored (CPython checks for signals at the end of
    a call): the KeyboardInterrupt comes out of the assignment, the ``finally`` sees no
    descriptor and left the file it created behind (the "no p.json.lock left" promise of
    docs/overview.md). Simulated: os.open opens, then raises as the handler would."""
    lock = tmp_path / "p.json.lock"
    real_open = os.open
    shots = [0]

    def interrupted_open(path: Any, flags: int, *args: Any) -> int:
        descriptor = real_open(path, flags, *args)
        if os.fspath(path) == os.fspath(lock) and shots[0] == 0:
            shots[0] += 1
            os.close(descriptor)  # the real race leaks it; the test keeps its descriptors
            raise KeyboardInterrupt("at os.open's return")
        return descriptor

    monkeypatch.setattr(files.os, "open", interrupted_open)
    with pytest.raises(KeyboardInterrupt):
        files.exclusive(lock, lambda: None)
    monkeypatch.setattr(files.os, "open", real_open)
    assert not lock.exists()
    assert files.exclusive(lock, lambda: 7) == 7  # and the next one takes it
    assert not lock.exists()


def test_a_special_file_at_the_lock_path_is_refused_and_kept(tmp_path: Path) -> None:
    """The lock path taken by a FIFO: refused (FileRefused), and the FIFO is not removed
    by the cleanup meant for the lock file."""
    lock = tmp_path / "p.json.lock"
    os.mkfifo(lock)
    with pytest.raises(files.FileRefused):
        files.exclusive(lock, lambda: None)
    assert lock.is_fifo()
