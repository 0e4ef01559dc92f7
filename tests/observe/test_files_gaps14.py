"""What Round 14i's fresh draw of ``arena/observe/files.py`` (after ``exclusive``'s last
change) found the suite let through (issue 26 item 12): a file of exactly the limit is
read, and a writer that waited for the lock file its holder then removed starts again on
a new one."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from arena.observe import files


@pytest.mark.parametrize("size", [1, 5, 64])
def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_refused(
    tmp_path: Path, size: int
) -> None:
    """Kills ``read_regular`` #13 (``>=`` for the size check), #16 (the count starting at
    1) and #34 (``>=`` for the grown-while-read check)."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    assert files.read_regular(path, size, "the limit") == b"x" * size
    with pytest.raises(files.FileRefused, match=rf"more than the limit \({size - 1} bytes\)"):
        files.read_regular(path, size - 1, "the limit")


def test_a_writer_that_waited_for_a_removed_lock_file_starts_again_on_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills ``exclusive`` #36 (the stale descriptor's hand-over made a TypeError): the
    second writer waits in ``flock`` on the first one's lock file, which the first
    removes as it finishes; the second then finds the path gone, lets go of that file
    and locks a new one."""
    lock = tmp_path / "lock"
    holding, waiting, release = threading.Event(), threading.Event(), threading.Event()
    blocking_flock = fcntl.flock

    def flock(descriptor: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and holding.is_set():
            waiting.set()  # the second writer is about to wait for the first
        blocking_flock(descriptor, operation)

    monkeypatch.setattr(fcntl, "flock", flock)

    # Each action notes itself while it holds the lock: the order of the holds, not of
    # the threads' returns (the second may return first once the first let go).
    results: list[str] = []

    def hold() -> None:
        holding.set()
        assert release.wait(10)
        results.append("first")

    first = threading.Thread(target=lambda: files.exclusive(lock, hold))
    first.start()
    assert holding.wait(10)
    second = threading.Thread(
        target=lambda: files.exclusive(lock, lambda: results.append("second"))
    )
    second.start()
    assert waiting.wait(10)
    release.set()
    first.join(10)
    second.join(10)
    assert results == ["first", "second"]
    assert not os.path.exists(lock)
