"""Gaps a planted-bug review (plant33) found in the snapshot and the event log: each test
fails on one realistic slip in the code (named in its docstring) and passes on the real
code."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.observe import snapshot
from arena.observe.snapshot import CSV_HEADER, EventLog


def test_the_event_log_stamps_microseconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RMM's ``Time`` column is ``HH:MM:SS:micros``: six digits of microseconds (slip:
    the fraction scaled by 1e3, milliseconds padded to six digits)."""
    monkeypatch.setattr(snapshot.time, "time", lambda: 3600 * 5 + 61.123456)
    path = tmp_path / "events.csv"
    log = EventLog(path)
    log("allocate", 0x1000, 256, "scratch")
    header, line = path.read_text().splitlines()
    assert header == CSV_HEADER
    fields = line.split(",")
    assert fields[1] == "05:01:01:123456"
    assert fields[2:] == ["allocate", "0x1000", "256", "0"]
