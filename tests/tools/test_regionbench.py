"""The bench's step and scope figures (a smoke run: no timing assertions)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from arena.tools import regionbench
from arena.tools.regionbench import format_regions, format_regions_over_empty, region_figures


def test_region_figures_cover_every_framework_and_grad_mode() -> None:
    figures = region_figures(quick=True)
    modes = {"numpy": ["-"], "torch": ["grad", "no_grad", "inference"]}
    expected = {f: m for f, m in modes.items() if importlib.util.find_spec(f) is not None}
    assert {f: list(m) for f, m in figures.items()} == expected
    for per_mode in figures.values():
        for figure in per_mode.values():
            assert figure["plain_us"] > 0
            assert figure["kept_us"] > 0
            assert figure["empty_us"] > 0
            for name in (
                "step_over_plain",
                "step_over_kept",
                "scope_over_plain",
                "step_enter_exit_us",
                "release_us",
                "plain_over_empty",
                "step_over_empty",
                "scope_over_empty",
            ):
                f = figure[name]
                assert f["p10"] <= f["median"] <= f["p90"]
    lines = format_regions(figures)
    # a title, a header, a line per framework and mode, and the line naming the two ratios
    assert len(lines) == 4 + sum(len(m) for m in figures.values())
    assert any("step/kept plain" in line for line in lines)
    over_empty = format_regions_over_empty(figures)
    assert len(over_empty) == 3 + sum(len(m) for m in figures.values())
    assert "against the framework's empty" in over_empty[1]


def test_each_figure_takes_its_own_blocks_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # planted49: the scope's ratio over the empty operation taking the empty *step*'s time
    # (`scope - empty_step_us`, a copy slip) passed tests/tools, whose smoke run asserts
    # no figure's value. Each block here takes a time of its own, each figure its formula.
    us = {
        "step": 1000.0,
        "released": 1640.0,
        "empty_step": 40.0,
        "scope": 800.0,
        "empty_scope": 30.0,
        "plain": 500.0,
        "kept": 600.0,
        "with": 10.0,
        "empty": 250.0,
    }

    def timed(blocks: dict[str, Any], rounds: int, reps: int) -> dict[str, list[float]]:
        assert list(blocks) == list(us)
        return {name: [us[name]] * rounds for name in blocks}

    monkeypatch.setattr(regionbench, "_timed", timed)
    (figure,) = regionbench._framework_figures("numpy", "cpu", rounds=3, reps=1).values()
    medians = {name: f["median"] for name, f in figure.items() if isinstance(f, dict)}
    assert medians == {
        "step_over_plain": (1000 - 40) / 500,
        "step_over_kept": (1000 - 40) / 600,
        "scope_over_plain": (800 - 30) / 500,
        "step_enter_exit_us": 40 - 10,
        "release_us": (1640 - 1000) / regionbench.BATCH,
        "plain_over_empty": 500 / 250,
        "step_over_empty": (1000 - 40) / 250,
        "scope_over_empty": (800 - 30) / 250,
    }
    per_request = {name: figure[f"{name}_us"] for name in ("plain", "kept", "empty")}
    assert per_request == {name: us[name] / regionbench.BATCH for name in per_request}


def test_no_figures_make_no_table() -> None:
    assert format_regions_over_empty({}) == []


@pytest.mark.gpu
def test_region_figures_on_a_cuda_device_time_cupy_and_torch_against_their_empty() -> None:
    figures = region_figures(quick=True, device="cuda:0")
    assert set(figures) == {"cupy", "torch"}
    assert list(figures["cupy"]) == ["-"]
    for per_mode in figures.values():
        for figure in per_mode.values():
            assert figure["empty_us"] > 0 and figure["plain_us"] > 0
            for name in ("plain_over_empty", "step_over_empty", "scope_over_empty"):
                f = figure[name]
                assert f["p10"] <= f["median"] <= f["p90"]
    lines = format_regions_over_empty(figures, "cuda:0")
    assert "on cuda:0" in lines[1]
