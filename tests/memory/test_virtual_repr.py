"""What a user can reach from a fixed-address host source's views prints without a crash.

The source reserves far more address space than it commits; an array over the whole
reserved range, reachable as a view's ``base``, made ``repr(view.base)`` read pages never
committed: a segmentation fault. Each check runs in a child process, so that a crash fails
the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)

_PROGRAM = textwrap.dedent(
    """
    import numpy as np
    import arena

    kwargs = {} if FROM_ENV else {"source": "virtual"}
    ws = arena.Arena("cpu", framework="numpy", max_bytes="64MiB", **kwargs)
    assert type(ws.source).__name__ == "VirtualHostSource", ws.source
    small, = ws.get_simultaneous(((16,), "float32"))
    small[...] = 2.0
    printed = [repr(small), str(small), repr(small.base), str(small.base)]
    printed.append(repr(np.asarray(small.base.base)))
    big, = ws.get_simultaneous(((300_000,), "float32"))  # grows: commits more
    printed += [repr(big.base), repr(small.base), repr(np.asarray(big.base.base))]
    with ws.scope():
        inner, = ws.get_simultaneous(((8,), "int8"))
        printed += [repr(inner.base), str(inner.base)]
    persistent = ws.get_persistent("p", (4,), "float32")
    printed += [repr(persistent), repr(persistent.base)]
    ws.close()
    printed += [repr(small.base), repr(big.base)]
    print("ok", len(printed))
    """
)


@pytest.mark.parametrize("from_env", [False, True], ids=["argument", "ARENA_SOURCE"])
def test_repr_of_every_reachable_array_of_a_virtual_source_is_safe(from_env: bool) -> None:
    env = dict(os.environ)
    env.pop("ARENA_SOURCE", None)
    if from_env:
        env["ARENA_SOURCE"] = "virtual"
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM.replace("FROM_ENV", str(from_env))],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["ok", "14"]


def test_a_virtual_views_base_covers_the_committed_bytes_only() -> None:
    from arena import Arena

    with Arena("cpu", framework="numpy", source="virtual", max_bytes="64MiB") as ws:
        view, *_ = ws.get_simultaneous(((16,), "float32"))
        # Plain integers only: were the test to fail, pytest's message would print the
        # arrays themselves, reading the very pages this checks are not reachable.
        size, start, under = view.base.nbytes, view.base.ctypes.data, view.base.base.nbytes
        assert size < 64 << 20  # not the reserved range
        assert size % os.sysconf("SC_PAGE_SIZE") == 0
        assert start == view.ctypes.data  # the block starts the range
        assert under == size  # the buffer under it is cut as well
