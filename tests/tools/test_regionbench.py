"""The bench's step and scope figures (a smoke run: no timing assertions)."""

from __future__ import annotations

import importlib.util

from arena.tools.regionbench import format_regions, region_figures


def test_region_figures_cover_every_framework_and_grad_mode() -> None:
    figures = region_figures(quick=True)
    modes = {"numpy": ["-"], "torch": ["grad", "no_grad", "inference"]}
    expected = {f: m for f, m in modes.items() if importlib.util.find_spec(f) is not None}
    assert {f: list(m) for f, m in figures.items()} == expected
    for per_mode in figures.values():
        for figure in per_mode.values():
            assert figure["plain_us"] > 0
            assert figure["kept_us"] > 0
            for name in (
                "step_over_plain",
                "step_over_kept",
                "scope_over_plain",
                "step_enter_exit_us",
                "release_us",
            ):
                f = figure[name]
                assert f["p10"] <= f["median"] <= f["p90"]
    lines = format_regions(figures)
    # a title, a header, a line per framework and mode, and the line naming the two ratios
    assert len(lines) == 4 + sum(len(m) for m in figures.values())
    assert any("step/kept plain" in line for line in lines)
