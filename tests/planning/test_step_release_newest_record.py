"""release() reads only the newest record at a view's address, on both hit paths."""

from __future__ import annotations

from arena import Arena, ArenaError
from arena.planning.runs import POINTER

F32 = "float32"


def test_the_newest_record_at_an_address_decides_though_an_older_one_matches(
    hit_path: str,
) -> None:
    """A view's address recorded again for a later block (the record forged, as CPython
    reuses the address of a view that died): release() of the view reads that newest
    record only, whose witness is another block's, and refuses it, on both hit paths,
    leaving every block live. Slip: the compiled release went on past a newest record
    that did not match, to an older one at the same address, and released that block
    where its Python mirror refused."""
    outcomes = []
    with Arena("cpu", framework="numpy") as ws:
        for run in range(4):
            if run == 3:
                ws.lock()
            with ws.step("older") as st:
                (a,) = st.get_simultaneous(((8,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                (c,) = st.get_simultaneous(((24,), F32))
                if st.replay and run >= 2:
                    size = POINTER.size
                    st.run.ids[2 * size : 3 * size] = POINTER.pack(id(a))  # block 2's, now
                    try:
                        st.release(a)
                        outcomes.append("released")
                    except ArenaError as exc:
                        outcomes.append("refused" if "not handed out" in str(exc) else str(exc))
                    assert st.run.released == set()
                    st.run.ids[2 * size : 3 * size] = POINTER.pack(id(c))  # the true record
                st.release(a, b, c)
    assert outcomes == ["refused", "refused"]
