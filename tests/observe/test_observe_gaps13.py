"""Round 13a (issue 26 item 12): tests that kill mutants the suite let through.

``arena/observe/ranks.py`` (torch.distributed's figures, the launcher's, the
defaults), ``arena/observe/files.py`` (the words for each kind of file, the modes of the
files made, a file that holds more than its size says, the lock path opened without
blocking) and ``arena/observe/plot.py`` (what each panel of the report's picture draws:
the figure is kept open and read back).
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena.observe import files, ranks

MB = 1024 * 1024


# ---------------------------------------------------------------- ranks
def _dist(available: bool = True, initialized: bool = True, rank: int = 5, world: int = 8) -> Any:
    """A stand-in ``torch.distributed``; one not available has nothing else (as a torch
    built without distributed support)."""
    if not available:
        return types.SimpleNamespace(is_available=lambda: False)
    return types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: initialized,
        get_rank=lambda: rank,
        get_world_size=lambda: world,
    )


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher variables and no torch.distributed, to be set by each test."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    return monkeypatch


def test_an_initialised_torch_distributed_gives_the_rank_and_world_size(
    launcher: pytest.MonkeyPatch,
) -> None:
    launcher.setenv("RANK", "1")
    launcher.setenv("WORLD_SIZE", "2")
    launcher.setitem(sys.modules, "torch.distributed", _dist(rank=5, world=8))
    assert ranks.process_rank() == 5
    assert ranks.world_size() == 8


def test_torch_distributed_not_initialised_leaves_the_launchers_figures(
    launcher: pytest.MonkeyPatch,
) -> None:
    launcher.setenv("RANK", "3")
    launcher.setenv("WORLD_SIZE", "4")
    launcher.setitem(sys.modules, "torch.distributed", _dist(initialized=False))
    assert (ranks.process_rank(), ranks.world_size()) == (3, 4)
    # A torch built without distributed support has no is_initialized to ask.
    launcher.setitem(sys.modules, "torch.distributed", _dist(available=False))
    assert (ranks.process_rank(), ranks.world_size()) == (3, 4)


def test_without_a_launcher_the_rank_is_0_of_1(launcher: pytest.MonkeyPatch) -> None:
    assert (ranks.process_rank(), ranks.world_size()) == (0, 1)
    launcher.setenv("RANK", "first")
    launcher.setenv("WORLD_SIZE", "many")
    assert (ranks.process_rank(), ranks.world_size()) == (0, 1)
    launcher.setenv("WORLD_SIZE", "0")
    assert ranks.world_size() == 1


# ---------------------------------------------------------------- files
def test_each_kind_of_file_is_named() -> None:
    assert files.file_kind(stat.S_IFIFO) == "a FIFO"
    assert files.file_kind(stat.S_IFCHR) == "a character device"
    assert files.file_kind(stat.S_IFBLK) == "a block device"
    assert files.file_kind(stat.S_IFDIR) == "a directory"
    assert files.file_kind(stat.S_IFSOCK) == "a socket"
    assert files.file_kind(stat.S_IFLNK) == "not a regular file"


@pytest.fixture
def umask_022() -> Iterator[int]:
    old = os.umask(0o022)
    try:
        yield 0o022
    finally:
        os.umask(old)


def test_an_appended_file_is_made_readable_and_writable_by_all_the_umask_allows(
    tmp_path: Path, umask_022: int
) -> None:
    path = tmp_path / "events.log"
    descriptor = files.open_append(path)
    os.close(descriptor)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask_022


def test_the_lock_file_is_made_readable_and_writable_by_all_the_umask_allows(
    tmp_path: Path, umask_022: int
) -> None:
    lock = tmp_path / "p.json.lock"
    mode = files.exclusive(lock, lambda: stat.S_IMODE(lock.stat().st_mode))
    assert mode == 0o666 & ~umask_022
    assert not lock.exists()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_file_that_holds_more_than_its_size_says_is_refused_at_the_limit() -> None:
    # /proc's files say 0 bytes and hold more: read past the limit, they are refused.
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    with pytest.raises(files.FileRefused, match=r"holds more than the status limit \(64 bytes\)"):
        files.read_regular(status, 64, "the status limit")
    assert files.read_regular(status, 1 << 20, "a MiB").startswith(b"Name:")


def test_an_interrupted_lock_reopens_its_path_without_blocking_on_a_fifo_put_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted as os.open returns (tests/observe/test_hostile41_files.py), the lock
    opens its path again to remove the file it made; a FIFO put there meanwhile must not
    block that open (O_NONBLOCK) and is kept."""
    lock = tmp_path / "p.json.lock"
    real_open = os.open
    flags_seen: list[int] = []

    def interrupted_open(path: Any, flags: int, *args: Any) -> int:
        if os.fspath(path) != os.fspath(lock):
            return real_open(path, flags, *args)
        flags_seen.append(flags)
        if len(flags_seen) == 1:
            os.close(real_open(path, flags, *args))
            os.unlink(lock)
            os.mkfifo(lock)  # put there before the handler runs
            raise KeyboardInterrupt("at os.open's return")
        if not flags & os.O_NONBLOCK:  # would wait for a writer for ever
            raise BlockingIOError("a FIFO opened without O_NONBLOCK")
        return real_open(path, flags, *args)

    monkeypatch.setattr(files.os, "open", interrupted_open)
    with pytest.raises(KeyboardInterrupt):
        files.exclusive(lock, lambda: None)
    assert len(flags_seen) == 2 and all(flags & os.O_NONBLOCK for flags in flags_seen)
    assert lock.is_fifo()


# ---------------------------------------------------------------- plot
def _report() -> dict[str, Any]:
    """A report of two micro-batches and two lanes: slot (1, 0) is sized like its sibling
    micro-batch, slot (0, 0) has a LOAD and a planned need."""
    sites = [
        {"site": "a.py:1", "ubatch": 0, "lane": 0, "peak": 3 * MB, "share": 0.75,
         "sizes_slot": True},
        {"site": "a.py:2", "ubatch": 0, "lane": 0, "peak": 1 * MB, "share": 0.25,
         "sizes_slot": False},
        {"site": "b.py:7", "ubatch": 0, "lane": 1, "peak": 2 * MB, "share": 1.0,
         "sizes_slot": True},
        {"site": "a.py:1", "ubatch": 1, "lane": 0, "peak": 1 * MB, "share": 1.0,
         "sizes_slot": False},
    ]  # fmt: skip
    slot = {"planned": None, "load": None, "capacity_over_load": None, "planned_over_load": None}
    slots = [
        {**slot, "ubatch": 0, "lane": 0, "capacity": 4 * MB, "load": 2 * MB,
         "capacity_over_load": 2.0, "planned": 3 * MB, "planned_over_load": 1.5},
        {**slot, "ubatch": 0, "lane": 1, "capacity": 2 * MB},
        {**slot, "ubatch": 1, "lane": 0, "capacity": 4 * MB},
    ]  # fmt: skip
    timeline = [
        {"t": 0.001, "ubatch": 0, "lane": 0, "old": 0, "new": 4 * MB, "kind": "grow",
         "caller": "a.py:1"},
        {"t": 0.002, "ubatch": 0, "lane": 1, "old": 0, "new": 2 * MB, "kind": "grow",
         "caller": "b.py:7"},
    ]  # fmt: skip
    return {"device": "cpu", "ubatches": 2, "lanes": 2, "runs": 1, "sites": sites,
            "slots": slots, "timeline": timeline}  # fmt: skip


@pytest.fixture
def drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    """The figure of :func:`_report`'s picture, kept open, and the PNG file."""
    pytest.importorskip("matplotlib")
    from arena.observe import plot

    figures: list[Any] = []
    monkeypatch.setattr(plot.plt, "close", figures.append)
    path = tmp_path / "report.png"
    plot.plot_report(_report(), str(path))
    (figure,) = figures
    try:
        yield figure, path
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


def _text(ax: Any, start: str) -> Any:
    (text,) = [t for t in ax.texts if t.get_text().startswith(start)]
    return text


def test_the_picture_is_saved_at_110_dots_per_inch(drawn: tuple[Any, Path]) -> None:
    figure, path = drawn
    width, _ = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG's IHDR
    assert figure.get_figwidth() == 11 and width == 11 * 110


def test_the_demand_panel_draws_each_slots_sites_under_it(drawn: tuple[Any, Path]) -> None:
    figure, _ = drawn
    top = figure.axes[0]
    labels = [t.get_text() for t in top.get_yticklabels()]
    assert labels == [
        "a.py:1", "a.py:2", "",  # slot (0, 0)
        "b.py:7", "",  # slot (0, 1)
        "a.py:1 (ubatch 0)", "a.py:1", "",  # slot (1, 0): sized like ubatch 0
    ]  # fmt: skip
    bars = top.patches
    assert [bar.get_y() + bar.get_height() / 2 for bar in bars] == [0, 1, 2.8, 4.6, 5.6]
    assert [bar.get_width() for bar in bars] == [3, 1, 2, 3, 1]
    sibling = _text(top, " 3.00 MB  sizes the slot (from ubatch 0)")
    assert sibling.get_fontsize() == 9


def test_the_load_panel_draws_capacity_planned_need_and_load(drawn: tuple[Any, Path]) -> None:
    from matplotlib.colors import to_hex

    figure, _ = drawn
    middle = figure.axes[1]
    capacity, planned = middle.patches[:2]
    assert (capacity.get_y(), capacity.get_height()) == pytest.approx((-0.35, 0.34))
    assert (planned.get_y(), planned.get_height()) == pytest.approx((0.01, 0.34))
    notes = [t.get_text() for t in middle.texts if not t.get_text().startswith("LOAD")]
    assert notes == [
        " capacity 4.00 MB (2.00 x LOAD)",
        " planned 3.00 MB (1.50 x LOAD)",
        " capacity 2.00 MB",
        " capacity 4.00 MB",
    ]
    (tick,) = middle.lines
    assert list(tick.get_xdata()) == [2, 2] and to_hex(tick.get_color()) == "#222222"
    load = _text(middle, "LOAD 2.00 MB ")
    assert (load.get_ha(), load.get_va()) == ("right", "top")


def test_the_load_panels_scale_holds_slots_that_never_grew(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from arena.observe import plot

    slots = [{"ubatch": 0, "lane": 0, "capacity": 0, "load": None, "planned": None,
              "capacity_over_load": None, "planned_over_load": None}]  # fmt: skip
    figure, ax = plt.subplots()
    try:
        plot._against_load(ax, slots)
        assert ax.get_xlim() == (0, 1 / MB * 1.5)  # a byte at least, shown as MB
    finally:
        plt.close(figure)


def test_the_timeline_marks_each_growth_of_each_lanes_slot(drawn: tuple[Any, Path]) -> None:
    figure, _ = drawn
    bottom = figure.axes[2]
    legend = [t.get_text() for t in bottom.get_legend().get_texts()]
    assert legend == ["slot ubatch 0, lane 0", "slot ubatch 0, lane 1", "slot ubatch 1, lane 0"]
    notes = {a.get_text().split("\n")[0]: a.xy for a in bottom.texts}
    assert notes == {"a.py:1": (1, 4.0), "b.py:7": (2, 2.0)}
    assert bottom.get_ylim() == pytest.approx((-0.05 * 4, 4 * 1.25))


def test_the_timelines_scale_starts_below_0_by_a_twentieth_of_its_top(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from arena.observe import plot

    report = _report()
    report["timeline"] = [{"t": 0.001, "ubatch": 0, "lane": 0, "old": 0, "new": MB // 2,
                           "kind": "presize", "caller": "a.py:1"}]  # fmt: skip
    figure, ax = plt.subplots()
    try:
        plot._timeline(ax, report)
        # The top is 1 MB at least, so half a MB shows below 0.8 of the height.
        assert ax.get_ylim() == pytest.approx((-0.05, 1.25))
        (note,) = ax.texts
        assert note.get_text().startswith("presized from the profile\n0.00 -> 0.50 MB")
    finally:
        plt.close(figure)


def test_a_file_that_took_the_lock_files_place_meanwhile_is_not_removed(
    tmp_path: Path,
) -> None:
    """Round 13a's bug (files.py exclusive #40): the holder removed whatever the lock path
    named when done. A lock file deleted during the action (by hand, a cleaner) lets a
    new writer make and lock its own; removing that one let a third writer in beside the
    second. The holder removes only the file it locked."""
    lock = tmp_path / "p.json.lock"

    def replaced() -> None:
        os.unlink(lock)
        lock.write_text("another writer's lock file")

    files.exclusive(lock, replaced)
    assert lock.read_text() == "another writer's lock file"
    os.unlink(lock)
    files.exclusive(lock, lambda: None)  # the plain case still removes its own
    assert not lock.exists()
