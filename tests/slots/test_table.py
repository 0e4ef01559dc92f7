"""SlotTable.announce and the request path that skips it when nobody hears a resize."""

from __future__ import annotations

import logging

import pytest

from arena import Arena, ArenaEvent


def test_a_growth_is_logged_at_debug_level_without_debug_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No listener, no debug mode: the ``arena`` logger at DEBUG still hears of a
    request's growth (slip: the miss path skipped announce() on ``watched`` alone)."""
    caplog.set_level(logging.DEBUG, logger="arena")
    with Arena("cpu", framework="numpy") as a:
        assert not a._table.watched
        a.get_simultaneous(((1000, 17), "float16"), ((33,), "int32"))
    assert "resized slot (ubatch 0, lane 0) from 'test_table.py:" in caplog.text


def test_the_resize_line_names_the_bytes_of_a_growth_under_a_hundredth_of_a_megabyte(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A small slot's growth read "0.00 MB -> 0.00 MB" in the debug log, twice for two
    different growths (found by a new user trying the examples with ``debug=True``)."""
    caplog.set_level(logging.DEBUG, logger="arena")
    with Arena("cpu", framework="numpy", profile=False) as a:
        a.get_simultaneous(((64,), "float32"))
        a.get_simultaneous(((65,), "float32"))
    lines = [m for m in caplog.messages if "resized slot" in m]
    assert [line.split("': ", 1)[1] for line in lines] == [
        "0.00 MB -> 0.00 MB (0 -> 256 bytes; 1 ubatches x 1 lanes, total memory 0.00 MB)",
        "0.00 MB -> 0.00 MB (256 -> 512 bytes; 1 ubatches x 1 lanes, total memory 0.00 MB)",
    ]


def test_watched_follows_the_listeners_and_debug_mode() -> None:
    """Every resize reaches the listeners registered, none once the last one is gone
    (slip: remove_listener left ``watched`` set, or cleared it with one listener left)."""
    heard: list[tuple[str, int]] = []
    other: list[str] = []

    def listen(event: ArenaEvent) -> None:
        heard.append((event.kind, event.new_bytes))

    def listen_too(event: ArenaEvent) -> None:
        other.append(event.kind)

    with Arena("cpu", framework="numpy") as a:
        table = a._table
        a.add_listener(listen)
        a.add_listener(listen_too)
        assert table.watched
        a.get_simultaneous(((1024,), "uint8"))
        a.remove_listener(listen_too)
        assert table.watched
        a.get_simultaneous(((1 << 16,), "uint8"))
        a.remove_listener(listen)
        assert not table.watched
        a.get_simultaneous(((1 << 18,), "uint8"))
        sizes = [new for kind, new in heard if kind == "resize"]
        assert len(sizes) == 2 and sizes[-1] >= 1 << 16
        assert other == ["resize"]
    with Arena("cpu", framework="numpy", debug=True) as a:
        a.add_listener(listen)
        a.remove_listener(listen)
        assert a._table.watched  # debug mode logs every resize
