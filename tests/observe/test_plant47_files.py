"""Plant round 47 on :func:`arena.observe.files.exclusive` and ``os.fork()``: a child
closes its copies of the lock files' descriptors that *other* threads of the parent held
(``_close_in_child``), and keeps the forking thread's own, which goes on in the child and
closes it itself as its ``exclusive`` returns. A child that closed that one too made its
own ``exclusive`` fail as it returned (``OSError`` EBADF from the close of a number
already closed, or worse, the close of another file opened under that number since)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from arena.observe import files


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_the_action_returns_from_exclusive(tmp_path: Path) -> None:
    """The action forks; the child, the same thread, returns from ``exclusive`` with the
    action's value (exit 0) and the parent's lock is its own to let go of."""
    path = tmp_path / "p.json.lock"
    parent = os.getpid()

    def action() -> int:
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a multi-threaded process (JAX's threads).
            warnings.simplefilter("ignore")
            return os.fork()

    try:
        pid = files.exclusive(path, action)
    except BaseException:
        if os.getpid() != parent:  # the child: exclusive raised as it returned
            os._exit(3)
        raise
    if pid == 0:  # the child: exclusive returned the action's value
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not path.exists()  # removed by the holder (the parent, or the child first)
