"""Round 13d's mutation gaps in the kernels group (``arena/kernels/library.py``): each
test fails on the mutant it names (planted by hand, seen to fail) and passes on the real
code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena, SpecError
from arena.slots.workspaces import WorkspaceStore


def test_a_numpy_int_size_is_refused_naming_the_int_to_pass() -> None:
    # library.py check_nbytes #10 (plain_int_fix(None)): a NumPy integer's size was
    # refused without the fix (pass int(...) of it).
    with Arena("cpu", framework="numpy") as ws, pytest.raises(SpecError) as caught:
        ws.get_library_workspace("k", np.int64(64))  # type: ignore[arg-type]
    assert str(caught.value).endswith("(int64 is not a Python int: pass int(...) of it, 64)"), (
        caught.value
    )


def test_a_zero_init_growth_is_zero_for_a_caller_that_hands_it_out_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # library.py LibraryWorkspaces.get #68 (store.grow(..., zero_init=None)): the growth
    # copied the old contents into the new block and left the zeroing to the caller's
    # hand-out; a call for the key (without zero_init) that handed the new block out
    # first, as another thread may between the growth and that hand-out, got the old
    # bytes, and the zero_init caller then got them too ("the bytes are zero after every
    # growth").
    with Arena("cpu", framework="numpy") as ws:
        view = ws.get_library_workspace("k", 64)
        view[:] = 0xAB
        original = WorkspaceStore.hand_out
        calls: list[int] = []

        def hand_out(store: WorkspaceStore, entry: Any, zero_init: bool) -> None:
            if not calls:
                calls.append(entry.nbytes)
                ws.get_library_workspace("k", 64)  # served: the new block holds 64 bytes
            original(store, entry, zero_init)

        monkeypatch.setattr(WorkspaceStore, "hand_out", hand_out)
        grown = ws.get_library_workspace("k", 4096, zero_init=True)
        assert calls == [4096]
        assert not grown[:64].any(), grown[:64]
