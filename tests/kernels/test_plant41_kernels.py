"""Library workspaces against bugs planted by hand (branch plant41, docs/testing.md
'Planted, 2026-12-03 (plant41)'): an arena of inference views whose default framework
has no inference arrays."""

from __future__ import annotations

import numpy as np

from arena import Arena


def test_an_inference_views_arena_of_numpy_hands_out_numpy_workspaces() -> None:
    """inference_views is about torch fronts only (Settings.inference_for): an arena
    made with it whose views are NumPy's hands out NumPy library workspaces, as its
    fronts are NumPy's. Plant killed: the assembly giving the library workspaces
    ``config.inference_views`` rather than ``config.inference_for(framework)``: they
    then asked NumPy's adapter for its inference adapter (None) and failed."""
    with Arena("cpu", framework="numpy", inference_views=True) as ws:
        view = ws.get_library_workspace("k", 4096)
        assert type(view) is np.ndarray and view.nbytes == 4096
        assert ws.front("numpy").inference is False
