"""A first sighting that does not fit a buffer this front never imported, during a capture.

The first import of a slot buffer into a framework is refused while a CUDA graph is
captured (``GraphCaptureError``, "the first numpy view of a ... slot buffer"), but only
for views that will be built over that buffer. A request that does not fit is a growth:
refused while locked (``try_get_simultaneous`` returns None, ``get_simultaneous`` raises
``ArenaLockedError``) or refused as a growth during the capture. The compiled NumPy
front's planner imported the buffer before it knew the request did not fit, so
``try_get_simultaneous`` raised ``GraphCaptureError`` where the Python path returned None
(found by a differential run of random programs, ``ARENA_PURE_PYTHON=1`` against the
compiled paths: 4 of 2000 programs).
"""

from __future__ import annotations

import pytest

from arena import Arena, ArenaLockedError, GraphCaptureError

BIG = ((4096,), "float32")  # 16 KiB: more than the 1 KiB reserved
SMALL = ((16,), "float32")


class _Probe:
    def __init__(self) -> None:
        self.capturing = False

    def __call__(self) -> bool:
        return self.capturing


def _arena(locked: bool) -> tuple[Arena, _Probe]:
    """A 1 KiB slot the NumPy front never imported (sized by reserve_bytes), capturing."""
    probe = _Probe()
    ws = Arena("cpu", framework="numpy", capture_probe=probe)
    ws.reserve_bytes(1024)
    if locked:
        ws.lock()
    probe.capturing = True
    return ws, probe


def test_try_get_returns_none_for_a_first_sighting_that_needs_growth(hit_path: str) -> None:
    ws, _ = _arena(locked=True)
    with ws:
        assert ws.numpy.try_get_simultaneous(BIG) is None
        assert ws.numpy.try_get_simultaneous(BIG) is None  # and at its second sighting


def test_get_names_the_locked_growth_at_a_first_sighting(hit_path: str) -> None:
    ws, _ = _arena(locked=True)
    with ws, pytest.raises(ArenaLockedError, match="16384 bytes"):
        ws.numpy.get_simultaneous(BIG)


def test_unlocked_the_growth_during_the_capture_is_named(hit_path: str) -> None:
    ws, _ = _arena(locked=False)
    with ws, pytest.raises(GraphCaptureError, match="growing slot"):
        ws.numpy.get_simultaneous(BIG)


def test_a_first_sighting_that_fits_still_refuses_the_first_import(hit_path: str) -> None:
    ws, probe = _arena(locked=True)
    with ws:
        with pytest.raises(GraphCaptureError, match="first numpy view"):
            ws.numpy.try_get_simultaneous(SMALL)
        probe.capturing = False
        (view,) = ws.numpy.get_simultaneous(SMALL)  # eagerly, as the message says
        probe.capturing = True
        assert ws.numpy.try_get_simultaneous(BIG) is None
        assert ws.numpy.get_simultaneous(SMALL)[0].shape == view.shape


def test_a_first_sighting_that_fills_the_buffer_exactly_fits(hit_path: str) -> None:
    """Round 20: a request of exactly the buffer's capacity fits (no growth): during the
    capture its first import is refused, as any that fits; eagerly it is served in place."""
    ws, probe = _arena(locked=True)
    with ws:
        exact = ((256,), "float32")  # 1 KiB: all the slot holds
        with pytest.raises(GraphCaptureError, match="first numpy view"):
            ws.numpy.try_get_simultaneous(exact)
        probe.capturing = False
        (view,) = ws.numpy.get_simultaneous(exact)  # locked: no growth
        assert view.shape == (256,)
        assert ws.stats().slots[0].capacity == 1024


def test_a_first_sighting_laid_out_at_the_arenas_alignment_needs_growth(hit_path: str) -> None:
    """Round 20: the fit is judged at the arena's alignment (two views, each at a multiple
    of 1 KiB: 2048 bytes), not at the default 256 bytes (which fit the 1 KiB slot, so the
    buffer would be imported, and the import refused during the capture)."""
    probe = _Probe()
    ws = Arena("cpu", framework="numpy", capture_probe=probe, alignment=1024)
    ws.reserve_bytes(1024)
    ws.lock()
    probe.capturing = True
    with ws:
        assert ws.numpy.try_get_simultaneous(SMALL, SMALL) is None
        with pytest.raises(ArenaLockedError, match="2048 bytes"):
            ws.numpy.get_simultaneous(SMALL, SMALL)
