"""Debug mode watches a table from the start: its growths are logged with no listener."""

from __future__ import annotations

import logging

import pytest

from arena import Arena


def test_debug_mode_logs_a_requests_growth_with_no_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With ``debug=True`` and the ``arena`` logger at INFO (not DEBUG), a request's growth
    is logged though no listener was ever added. Slip: ``SlotTable.watched`` started
    False whatever the mode (only add_listener set it), so the request path skipped
    announce() and debug mode's resize lines were lost."""
    caplog.set_level(logging.INFO, logger="arena")
    with Arena("cpu", framework="numpy", debug=True) as a:
        a.get_simultaneous(((1 << 16,), "uint8"))
    resized = [m for m in caplog.messages if "resized slot" in m]
    assert len(resized) == 1 and "0.06 MB" in resized[0]
