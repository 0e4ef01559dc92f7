"""A replayed step's hit under an observer (``arena.planning.scopes.served``): every
request of a replay is noted at its call site while the arena is unlocked, none once it
is locked; one served during a CUDA graph capture marks its buffer captured. Both hit
paths."""

from __future__ import annotations

from typing import Any

from arena import Arena
from tests.gates import Probe, moving_only

SPEC = ((64,), "float32")


def _run(ws: Arena, where: str) -> None:
    with ws.step("logged") as st:
        if where == "warm-up":
            st.get_simultaneous(SPEC)  # site: warm-up
        elif where == "replay":
            st.get_simultaneous(SPEC)  # site: replay
        else:
            st.get_simultaneous(SPEC)  # site: locked


def _sites(ws: Arena) -> dict[str, int]:
    found: dict[str, Any] = {}
    for site, peak in ws.stats().call_sites.items():
        for name in ("warm-up", "replay", "locked"):
            if "_run" in site and _line_of(name) in site:
                found[name] = peak
    return found


def _line_of(name: str) -> str:
    """``:LINE:`` of the request in :func:`_run` whose comment names ``name``."""
    with open(__file__) as source:
        for number, line in enumerate(source, start=1):
            if line.rstrip().endswith(f"# site: {name}"):
                return f":{number}:"
    raise AssertionError(name)


def test_a_replays_requests_are_noted_unlocked_and_not_locked(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):  # record, then plan and the first replay
            _run(ws, "warm-up")
        assert set(_sites(ws)) == {"warm-up"}
        _run(ws, "replay")  # the replay's hit, unlocked: noted at its own site
        assert _sites(ws) == {"warm-up": 256, "replay": 256}
        ws.lock()
        _run(ws, "locked")  # the same hit, locked: nothing noted
        _run(ws, "replay")
        assert set(_sites(ws)) == {"warm-up", "replay"}


@moving_only("a growth in place keeps the captured buffer where it is, retiring nothing")
def test_a_replay_served_during_a_capture_keeps_its_buffer_from_being_released(
    hit_path: str,
) -> None:
    """The graph captured the replay's pointers: a later growth retires the buffer (kept
    for the graph) instead of releasing it."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        for _ in range(2):
            _run(ws, "warm-up")
        probe.capturing = True
        _run(ws, "replay")  # the replay's hit, captured
        probe.capturing = False
        assert ws.stats().slots[0].retired_buffers == 0
        ws.get_simultaneous(((1 << 20,), "uint8"))  # grows the slot
        assert ws.stats().slots[0].retired_buffers == 1
