"""Gaps the mutation run of issue 26 (Round 6) found in the planning modules; each test
was seen to fail with its mutant planted by hand."""

from __future__ import annotations

import numpy as np
import pytest

from arena import Arena, ArenaError

F32 = "float32"


def test_a_view_given_twice_to_release_is_named_in_the_whole_message() -> None:
    # runs.py refused_release #4: the reason's words were changed around it ("XXreleased
    # twice in this callXX"); the step test matches only the words.
    with Arena("cpu", framework="numpy") as ws, ws.step("s") as st:
        (b,) = st.get_simultaneous(((64,), F32))
        with pytest.raises(ArenaError) as caught:
            st.release(b, b)
        assert str(caught.value) == (
            "release() takes views this run of step 's' handed out and has not released "
            "yet; got ndarray of shape (64,) (released twice in this call); nothing was "
            "released"
        )
        stranger = np.zeros(4, F32)
        with pytest.raises(ArenaError) as caught:
            st.release(stranger)
        assert "(not handed out by this run); nothing was released; release the view" in str(
            caught.value
        )
