"""The bench's whole-pass figures (a smoke run: no timing assertions)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from arena.core import Arena
from arena.tools.decoder import DOCS_LAYERS
from arena.tools.passbench import (
    INFERENCE_FRONT,
    METHODS,
    TOKENS,
    format_inference_front,
    format_passes,
    make_passes,
    pass_figures,
)

FRAMEWORKS = [f for f in ("numpy", "torch") if importlib.util.find_spec(f) is not None]


def _array(framework: str, value: object) -> np.ndarray:
    return np.array(value.numpy() if framework == "torch" else value)  # type: ignore[attr-defined]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_pass_computes_the_same_layers(framework: str) -> None:
    with Arena("cpu", framework=framework) as ws:
        passes = make_passes(framework, ws.front(framework), DOCS_LAYERS, TOKENS)
        assert list(passes) == list(METHODS)
        for run in ("record", "plan", "replay"):
            if run == "replay":
                ws.lock()
            results = {name: _array(framework, p()) for name, p in passes.items()}
            floor = results["floor"]
            assert floor.shape == (TOKENS, DOCS_LAYERS.hidden)
            assert np.isfinite(floor).all() and floor.std() > 0
            for name, result in results.items():
                np.testing.assert_array_equal(result, floor, err_msg=f"{name} ({run})")
        steps = ws.stats().slots[0]
        assert steps.capacity > 0


def test_pass_figures_cover_every_framework_and_mode() -> None:
    figures = pass_figures(quick=True)
    modes = {"numpy": ["-"], "torch": ["no_grad", "inference"]}
    assert {f: list(m) for f, m in figures.items()} == {f: modes[f] for f in FRAMEWORKS}
    for per_mode in figures.values():
        for figure in per_mode.values():
            assert all(figure[f"{name}_us"] > 0 for name in METHODS)
            for name in (
                "steps_over_floor",
                "scopes_over_floor",
                "empty_over_floor",
                "views_over_floor",
                "steps_over_views",
            ):
                f = figure[name]
                assert 0 < f["p10"] <= f["median"] <= f["p90"]
    lines = format_passes(figures)
    # a title, a header, a line per framework and mode, and the line naming the views pass
    assert len(lines) == 4 + sum(len(m) for m in figures.values())


@pytest.mark.skipif("torch" not in FRAMEWORKS, reason="needs torch")
def test_inference_front_figures_share_the_inference_rounds() -> None:
    figures = pass_figures(quick=True)
    inference = figures["torch"]["inference"]
    for name in INFERENCE_FRONT:
        assert inference[f"inference_front_{name}_us"] > 0
        for bottom in ("floor", "empty", name):
            f = inference[f"inference_front_{name}_over_{bottom}"]
            assert 0 < f["p10"] <= f["median"] <= f["p90"]
    f = inference["inference_front_plain_over_plain"]
    assert 0 < f["p10"] <= f["median"] <= f["p90"]
    assert inference["plain_request_us"] > 0 and inference["inference_front_plain_request_us"] > 0
    assert not any(key.startswith("inference_front") for key in figures["torch"]["no_grad"])
    lines = format_inference_front(figures)
    # a blank line, a title, a header, a line per pass, the plain request's line
    assert len(lines) == 4 + len(INFERENCE_FRONT)
    assert format_inference_front({"numpy": figures.get("numpy", {})}) == []
