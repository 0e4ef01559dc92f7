"""Gaps the mutation run of issue 26 (Round 6) found in :mod:`arena.slots.workspaces`;
each test was seen to fail with its mutant planted by hand."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from tests.memory.test_stream_release import FakeEvents, StreamOrderedSource

MB = 1 << 20


@pytest.mark.parametrize("key", [7, "lib", None])
def test_a_grown_library_workspace_is_released_on_the_current_streams_only(key: Any) -> None:
    # Planted bugs: a library workspace's key (an int, a name) passed as a stream its
    # old block waits on, as only a Triton block's key is.
    source = StreamOrderedSource(fake=FakeEvents(current=(0,)))
    with Arena(source=source, framework="numpy") as a:
        a.get_library_workspace(key, 1024)
        a.get_library_workspace(key, MB)  # growth: the 1 KiB block is released
        assert ("streams", ()) in source.fake.calls
        assert [c for c in source.fake.calls if c[0] == "streams"] == [("streams", ())]
        assert [c for c in source.fake.calls if c[0] == "record"] == [("record", 0)]
        source.fake.complete_all()
        a.get_persistent("p", (16,), "uint8")  # the next allocation gives it back
        assert ("release", 1024) in source.events
