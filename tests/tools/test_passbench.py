"""The bench's whole-pass figures (a smoke run: no timing assertions)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from arena.core import Arena
from arena.tools.decoder import DOCS_LAYERS
from arena.tools.passbench import (
    CACHED_FRONT,
    CLOCK,
    INFERENCE_FRONT,
    METHODS,
    TOKENS,
    format_cached_front,
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
            assert figure["clock"] == CLOCK
            for name in ("steps", "scopes", "views"):
                f = figure[f"wall_{name}_over_floor"]
                assert 0 < f["p10"] <= f["median"] <= f["p90"]
    lines = format_passes(figures)
    # a blank line, a title, a header, a line per framework and mode, the line naming the
    # views pass, and a wall-clock line per framework and mode
    assert len(lines) == 4 + 2 * sum(len(m) for m in figures.values())
    assert CLOCK in lines[1]


def test_a_published_run_from_before_the_cpu_clock_still_renders() -> None:
    """docs/bench/cpu.json's runs from before the thread's CPU time have no clock, no
    wall-clock ratios and no cached front: the tables say "wall clock" and leave out what
    was not measured."""
    figures = pass_figures(quick=True)
    old = {
        framework: {
            mode: {
                k: v
                for k, v in f.items()
                if k != "clock" and not k.startswith(("wall_", "cached_front_"))
            }
            for mode, f in modes.items()
        }
        for framework, modes in figures.items()
    }
    lines = format_passes(old)
    assert "by the wall clock;" in lines[1]
    assert len(lines) == 4 + sum(len(m) for m in old.values())
    assert format_cached_front(old) == []


def test_cached_front_figures_share_every_mode_s_rounds() -> None:
    """Every framework and mode times the cached front's steps and scopes passes in the
    same rounds as the default front's: paired with the floor, the views pass and the
    default front's own pass."""
    figures = pass_figures(quick=True)
    rows = 0
    for modes in figures.values():
        for figure in modes.values():
            for name in CACHED_FRONT:
                mine = f"cached_front_{name}"
                assert figure[f"{mine}_us"] > 0
                for bottom in ("floor", "views", name):
                    f = figure[f"{mine}_over_{bottom}"]
                    assert 0 < f["p10"] <= f["median"] <= f["p90"]
                rows += 1
    lines = format_cached_front(figures)
    # a blank line, a title, a header, a line per framework, mode and pass, the note
    assert len(lines) == 4 + rows
    assert rows == len(CACHED_FRONT) * sum(len(m) for m in figures.values())


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
