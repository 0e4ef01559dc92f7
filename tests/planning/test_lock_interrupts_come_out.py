"""An interrupt anywhere in ``lock()`` comes out of it (review 39).

``merged_plan`` asked ``any(book.running for book in books)``: ``any`` stops at the first
answer and leaves the generator suspended, to be closed when collected, and an interrupt
that lands in that close is printed as "Exception ignored" and lost, so lock() went on
as if nothing had happened (4 of 560 interrupt points of this program).
"""

from __future__ import annotations

import sys

from arena import Arena
from tests.interrupts import Injector


def _arena() -> Arena:
    """Two micro-batches that ran the same step keys with other sizes (lock() merges)."""
    ws = Arena("cpu", ubatches=2, framework="numpy", profile=False)
    for ubatch, n in ((0, 1000), (1, 2000)):
        with ws.ubatch(ubatch):
            for key in ("a", "b"):
                for _ in range(2):
                    with ws.step(key) as st:
                        st.get_simultaneous(((n,), "float32"))
                        st.get_simultaneous(((n // 2,), "float32"))
    return ws


def test_every_interrupt_in_lock_comes_out_as_itself() -> None:
    ws = _arena()
    injector = Injector(0)
    sys.settrace(injector)
    try:
        ws.lock()
    finally:
        sys.settrace(None)
    ws.close()
    lost = []
    for at in range(1, injector.count + 1):
        ws = _arena()
        shot = Injector(at)
        raised = None
        sys.settrace(shot)
        try:
            ws.lock()
        except KeyboardInterrupt as error:
            raised = error
        finally:
            sys.settrace(None)
        ws.close()
        if shot.fired and raised is None:
            lost.append(shot.where)
    assert not lost, lost
