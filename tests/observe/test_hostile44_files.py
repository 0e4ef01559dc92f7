"""Hostile round 44 on the profile lock, :func:`arena.observe.files.exclusive`: a second
interrupt while the first one's cleanup runs. Six processes saving in turn, each sent
SIGINTs every millisecond or two and going on after each (as a notebook does), ended
with four of them blocked in ``flock`` for good: one held the lock on a descriptor its
cleanup never closed, and waited on a new one for itself."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from arena.observe import files


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_second_interrupt_in_the_cleanup_still_closes_the_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first interrupt lands while the writer waits for the lock; its cleanup takes
    the lock (free by then) to remove the file as its holder, and a second interrupt lands
    at the stat after that: the descriptor stayed open with the flock held, so the next
    writer (this process or another) waited for ever. Simulated: the blocking flock raises
    as the handler would, then the cleanup's stat of the path."""
    lock = tmp_path / "p.json.lock"
    real_flock, real_stat = fcntl.flock, os.stat
    shots: list[str] = []

    def flock(descriptor: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and not shots:
            shots.append("waiting")
            raise KeyboardInterrupt("while waiting for the lock")
        real_flock(descriptor, operation)

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if shots == ["waiting"] and os.fspath(path) == os.fspath(lock):
            shots.append("cleanup")
            raise KeyboardInterrupt("in the first one's cleanup")
        return real_stat(path, *args, **kwargs)

    before = _open_descriptors()
    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(files.os, "stat", stat)
    with pytest.raises(KeyboardInterrupt, match="cleanup"):
        files.exclusive(lock, lambda: None)
    monkeypatch.setattr(files.os, "stat", real_stat)
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert shots == ["waiting", "cleanup"]
    assert _open_descriptors() == before  # nothing left open, so no flock held
    if lock.exists():  # left behind at worst: free, and the next writer removes it
        descriptor = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(descriptor)
    assert files.exclusive(lock, lambda: 7) == 7
    assert not lock.exists()
