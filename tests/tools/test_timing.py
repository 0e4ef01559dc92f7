"""The bench's pairing and its printed figures (arena/tools/timing.py): arithmetic, not speed."""

from __future__ import annotations

import statistics

import pytest

from arena.tools.timing import Paired, figure_spread, quantile, ratios, spread


def test_a_negative_percentile_does_not_read_as_a_subtraction() -> None:
    """A difference of two timings (a release's cost) can be negative under noise; the
    printed range said ``0.114 (-0.151-0.125)`` (a new user read it as a subtraction)."""
    assert spread(0.114, -0.151, 0.125) == "0.114 (-0.151 to 0.125)"
    assert str(Paired(0.33, 0.31, 0.35, 2.0, 6.0, 41)) == "0.33 (0.31 to 0.35)"


def test_ratios_pair_round_by_round() -> None:
    top, bottom = [2.0, 4.0, 9.0], [1.0, 4.0, 3.0]
    paired = ratios(top, bottom)
    assert paired.median == 2.0  # of 2, 1, 3: not median(top) / median(bottom) = 1
    assert (paired.top_us, paired.bottom_us, paired.rounds) == (4.0, 3.0, 3)
    assert paired.p10 == pytest.approx(1.2) and paired.p90 == pytest.approx(2.8)
    with pytest.raises(ValueError):
        ratios([1.0], [1.0, 2.0])


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_quantile_interpolates_between_the_ordered_values(q: float) -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantile(values, q) == pytest.approx(1.0 + 4.0 * q)
    if q == 0.5:
        assert quantile(values, q) == statistics.median(values)


def test_a_figure_of_the_json_prints_as_its_spread() -> None:
    assert figure_spread({"median": 1.02, "p10": 0.905, "p90": 1.1}) == "1.02 (0.905 to 1.1)"


def test_the_terminal_tables_keep_a_space_between_spread_cells() -> None:
    """With ' to ' the spreads grew 3 characters and ran into each other in the columns
    sized for the dash ('1.06 (1 to 1.08)1.03 (0.989 to 1.06)'); the published run's
    figures, the widest printed, must each stand apart."""
    import json
    import re
    from pathlib import Path

    from arena.tools.passbench import format_inference_front, format_passes
    from arena.tools.regionbench import format_regions

    checks = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "bench" / "cpu.json").read_text()
    )["checks"]
    lines = [
        *format_regions(checks["regions"]),
        *format_passes(checks["passes"]),
        *format_inference_front(checks["passes"]),
    ]
    assert [line for line in lines if " to " in line]
    assert not [line for line in lines if re.search(r"\)[-\d]", line)]
