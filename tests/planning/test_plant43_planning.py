"""Plants of branch plant43 (2026-12-03) that the suite did not catch: each test names
the bug it kills (docs/plants/plant43.md)."""

from __future__ import annotations

from arena import Arena

F32 = "float32"


def test_a_replayed_release_records_the_request_it_was_made_after(hit_path: str) -> None:
    """Kills: Step.release's hot path recording a released block's last request as
    ``self.request`` (the next request's index), not ``self.request - 1``, on the Python
    path (the compiled release's twin records ``request - 1``)."""
    with Arena("cpu", framework="numpy") as ws:
        seen: list[dict[int, int]] = []
        for _ in range(3):
            with ws.step("layer") as st:
                (a,) = st.get_simultaneous(((16,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                st.release(a)  # after request 1: block 0 lived through request 1
                (c,) = st.get_simultaneous(((16,), F32))
                seen.append(dict(st.run.lasts) if st.replay else {})
                st.release(b, c)
                del a, b, c
        assert seen[1:] == [{0: 1}, {0: 1}], seen
