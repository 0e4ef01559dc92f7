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


def test_an_interrupt_as_a_stale_lock_file_is_let_go_closes_its_descriptor_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that finds, once it holds the lock, that the path names another file (or
    none) closes its descriptor and tries again. A signal handled as that os.close returns
    (before ``descriptor = -1``) left the closed number in ``descriptor``: the ``finally``
    closed it again, raising OSError EBADF in place of the KeyboardInterrupt, or closing
    whatever file another thread had opened under that number meanwhile. Seen with real
    SIGINTs sent to four processes saving in turn; simulated here: the stat after the lock
    says the file is gone, and os.close closes, then raises as the handler would."""
    lock = tmp_path / "p.json.lock"
    real_stat, real_close = os.stat, os.close
    stats = [0]
    closed: list[int] = []

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == os.fspath(lock):
            stats[0] += 1
            if stats[0] == 2:  # the check after the flock (the first is refuse_special's)
                raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    def close(descriptor: int) -> None:
        closed.append(descriptor)
        real_close(descriptor)
        if len(closed) == 1:
            raise KeyboardInterrupt("at os.close's return")

    monkeypatch.setattr(files.os, "stat", stat)
    monkeypatch.setattr(files.os, "close", close)
    with pytest.raises(KeyboardInterrupt):
        files.exclusive(lock, lambda: None)
    monkeypatch.setattr(files.os, "close", real_close)
    monkeypatch.setattr(files.os, "stat", real_stat)
    assert len(closed) == len(set(closed)) == 1
    assert files.exclusive(lock, lambda: 7) == 7  # a lock file left is taken and removed
    assert not lock.exists()
