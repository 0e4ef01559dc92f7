"""Hostile round 45 on the profile lock, :func:`arena.observe.files.exclusive`, and
``os.fork()``: a ``flock`` belongs to the open file the descriptor names, which a child
shares through its copy of the descriptor. A child forked while another thread of the
parent held the lock kept that copy open for its whole life (the thread never runs
there), so the lock stayed held after the parent's writer let go: a writer in the child
that had found the lock file waited on it for good (every process that sets
``ARENA_PROFILE`` merges into the same file, under the same lock)."""

from __future__ import annotations

import fcntl
import os
import threading
import warnings
from pathlib import Path

import pytest

from arena.observe import files
from tests.gates import TIMEOUT


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_another_thread_holds_the_lock_lets_it_go(tmp_path: Path) -> None:
    """Thread "holder" holds the lock (inside its action) when the main thread forks. The
    child opens the lock file at once, as a writer of its own would, and waits until the
    parent's writer has let go (removed the file, closed its descriptor); the lock must be
    free then. It stayed held by the child's copy of the holder's descriptor."""
    path = tmp_path / "p.json.lock"
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def action() -> None:
        holding.set()
        assert release.wait(TIMEOUT)

    def hold() -> None:
        try:
            files.exclusive(path, action)
        except BaseException as error:  # handed to the test
            errors.append(error)

    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    assert holding.wait(TIMEOUT)
    opened, done = os.pipe(), os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ (and JAX, where another test loaded it) warn that forking a
        # multi-threaded process may deadlock; the child takes no lock but flock's.
        warnings.simplefilter("ignore")
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the lock is free once the parent let go
        code = 1
        try:
            descriptor = os.open(path, os.O_RDWR)
            os.write(opened[1], b"o")
            os.read(done[0], 1)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                code = 0
            except OSError:
                code = 3  # held by the child's copy of the holder's descriptor
        finally:
            os._exit(code)
    try:
        assert os.read(opened[0], 1) == b"o"
    finally:
        release.set()
        holder.join(TIMEOUT)
        os.write(done[1], b"d")
        _, status = os.waitpid(pid, 0)
        for end in (*opened, *done):
            os.close(end)
    assert not errors
    assert not path.exists()  # the parent's writer removed it
    assert os.waitstatus_to_exitcode(status) == 0
