"""Round 14e (issue 26 item 12): tests that kill mutants the suite let through.

``arena/observe/snapshot.py`` (the frames' file, a call site's line, the trace's
microseconds, a retired workspace block's requested bytes), ``report.py`` (the arena's
name and the largest layout in the JSON figures, the call-site table's slot column),
``files.py`` (a FIFO swapped in after the check, a lock file opened as descriptor 0),
``plot.py`` (the panels' heights) and ``ranks.py`` (a world of one).
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena import Arena
from arena.observe import files, ranks
from arena.observe.profilefile import read_profile
from arena.observe.report import analyse, format_analysis

MB = 1024 * 1024


# ---------------------------------------------------------------- snapshot
def test_a_snapshot_names_its_call_site_by_line_and_times_its_trace_in_microseconds() -> None:
    before = time.time()
    with Arena("cpu", framework="numpy", source="host") as a:
        line = sys._getframe().f_lineno + 1
        a.get_simultaneous(((256,), "uint8"))
        snapshot = a.memory_snapshot()
    after = time.time()
    (segment,) = snapshot["segments"]
    # The arena's own frames are named in file "arena", line 0 (torch's viewers show both).
    assert segment["frames"] == [
        {"filename": "arena", "line": 0, "name": "slot (ubatch 0, lane 0) scratch"}
    ]
    # The scratch block's frame is the request's call site, its line read as a number.
    (frame,) = segment["blocks"][0]["frames"]
    assert Path(frame["filename"]).name == Path(__file__).name
    assert (frame["line"], frame["name"]) == (line, sys._getframe().f_code.co_name)
    (entry,) = snapshot["device_traces"][0]
    assert entry["action"] == "segment_alloc"
    assert int(before * 1e6) <= entry["time_us"] <= int(after * 1e6) + 1
    assert entry["frames"] == [{"filename": "arena", "line": 0, "name": entry["frames"][0]["name"]}]


def test_a_retired_workspace_block_requests_no_bytes() -> None:
    capturing = [False]
    with Arena("cpu", framework="numpy", capture_probe=lambda: capturing[0]) as a:
        a.get_library_workspace("fi", 1000)
        capturing[0] = True
        a.get_library_workspace("fi", 1000)  # handed out during a capture
        capturing[0] = False
        a.get_library_workspace("fi", 5000)  # grows: the captured block is retired
        segments = a.memory_snapshot()["segments"]
    (retired,) = [s for s in segments if "retired" in s["blocks"][0]["frames"][0]["name"]]
    (block,) = retired["blocks"]
    assert block["state"] == "inactive"
    assert block["size"] > 0 and block["requested_size"] == 0
    (live,) = [s for s in segments if s is not retired]
    assert live["blocks"][0]["state"] == "active_allocated"
    assert live["blocks"][0]["requested_size"] == live["blocks"][0]["size"] > 0


# ---------------------------------------------------------------- report
def test_the_reports_figures_carry_the_arenas_name_and_each_sites_largest_layout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", profile=path, name="draft", lanes=2) as a:
        a.get_simultaneous(((100,), "float32"), ((7,), "int8"))
        with a.lane(1):
            a.get_simultaneous(((50,), "float32"))
    profile = read_profile(path)
    report = analyse(profile)
    assert report["name"] == "draft"
    for row in report["sites"]:
        (site,) = [
            s
            for s in profile["sites"]
            if (s["site"], s["ubatch"], s["lane"]) == (row["site"], row["ubatch"], row["lane"])
        ]
        assert row["largest_layout"] == site["layouts"][0]["views"]
    assert sorted(len(row["largest_layout"]) for row in report["sites"]) == [1, 2]
    json.dumps(report)  # JSON-ready, as --json prints it
    lines = format_analysis(report).splitlines()
    assert lines[0].endswith(" (arena 'draft')")
    start = lines.index("call sites (MB)") + 2
    assert [line[:8] for line in lines[start : start + 2]] == ["u0 l0   ", "u0 l1   "]


# ---------------------------------------------------------------- files
def test_a_fifo_swapped_in_after_the_check_is_refused_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path is checked, then opened: a FIFO put there in between must not block the
    open (O_NONBLOCK, no writer) and is refused by the check of the opened descriptor."""
    path = tmp_path / "p.json"
    path.write_text("{}")
    real_check, real_open = files.refuse_special, os.open

    def checked_then_swapped(where: Any) -> None:
        real_check(where)
        os.unlink(path)
        os.mkfifo(path)

    def never_blocking(where: Any, flags: int, *args: Any) -> int:
        if os.fspath(where) == os.fspath(path) and not flags & os.O_NONBLOCK:
            raise BlockingIOError("a FIFO opened without O_NONBLOCK waits for a writer")
        return real_open(where, flags, *args)

    monkeypatch.setattr(files, "refuse_special", checked_then_swapped)
    monkeypatch.setattr(files.os, "open", never_blocking)
    with pytest.raises(files.FileRefused, match=r"^it is a FIFO, not a regular file$"):
        files.read_regular(path, 1 << 20, "a MiB")
    assert path.is_fifo()


@pytest.fixture
def descriptor_0_free() -> Iterator[None]:
    """Standard input closed, as in a daemon: the next file opened gets descriptor 0."""
    saved = os.dup(0)
    os.close(0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_a_lock_file_opened_as_descriptor_0_is_closed_and_removed(
    tmp_path: Path, descriptor_0_free: None
) -> None:
    lock = tmp_path / "p.json.lock"

    def action() -> bool:  # the lock file is descriptor 0
        return os.fstat(0).st_ino == os.stat(lock).st_ino

    assert files.exclusive(lock, action)
    assert not lock.exists()
    with pytest.raises(OSError):  # closed: descriptor 0 is free again
        os.fstat(0)


# ---------------------------------------------------------------- plot
def test_the_panels_are_as_tall_as_their_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from arena.observe import plot

    figures: list[Any] = []
    monkeypatch.setattr(plot.plt, "close", figures.append)
    slot = {"planned": None, "load": None, "capacity_over_load": None, "planned_over_load": None}
    slots = [{**slot, "ubatch": 0, "lane": lane, "capacity": MB} for lane in range(2)]
    sites = [
        {"site": f"a.py:{lane}", "ubatch": 0, "lane": lane, "peak": MB, "share": 1.0,
         "sizes_slot": True}
        for lane in range(2)
    ]  # fmt: skip
    report = {"device": "cpu", "ubatches": 1, "lanes": 2, "runs": 1, "sites": sites,
              "slots": slots, "timeline": []}  # fmt: skip
    plot.plot_report(report, str(tmp_path / "report.png"))
    (figure,) = figures
    try:
        rows, bars = 4, 0.9 + 0.75 * 2  # two sites and two slots; two slots' bars
        ratios = figure.axes[0].get_gridspec().get_height_ratios()
        assert ratios == pytest.approx([0.9 + 0.42 * rows, bars, 3.4])
        assert figure.get_figheight() == pytest.approx(2.6 + 0.42 * rows + bars + 3.4)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


# ---------------------------------------------------------------- ranks
def test_an_initialised_torch_distributed_of_one_process_is_a_world_of_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")  # the launcher's figures, which torch overrides
    dist = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_rank=lambda: 0,
        get_world_size=lambda: 1,
    )
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    assert (ranks.process_rank(), ranks.world_size()) == (0, 1)
