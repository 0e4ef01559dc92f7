"""The bench's Markdown tables (arena/tools/benchtable.py): every figure of the JSON reaches
the page, under a name that says which figure it is."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena.tools.benchtable import render_markdown, replace_blocks

ROOT = Path(__file__).resolve().parents[2]

FIGURE = {"median": 0.97, "p10": 0.837, "p90": 1.18}


def _cells(markdown: str) -> list[str]:
    """The cells of the tables' bodies (not their headers)."""
    cells: list[str] = []
    in_body = False
    for line in markdown.splitlines():
        if line.startswith("|---"):
            in_body = True
        elif line.startswith("|") and in_body:
            cells += [c.strip() for c in line.strip("|").split("|")]
        else:
            in_body = False
    return cells


def test_figures_sharing_field_names_are_one_row_each() -> None:
    """Five ratios, each with a median, p10 and p90, and three plain fields: before the
    fix the table kept only the last ratio's three numbers under bare ``median`` columns."""
    record = {
        "step_over_plain": FIGURE,
        "release_us": {"median": 0.0649, "p10": 0.055, "p90": 0.0821},
        "plain_us": 0.108,
        "rounds": 31,
    }
    text = render_markdown({"checks": {"regions": record}}, ["checks"])
    assert "| step_over_plain | 0.970 | 0.837 | 1.18 |" in text
    assert "| release_us | 0.0649 | 0.0550 | 0.0821 |" in text
    assert "| figure | median | p10 | p90 |" in text
    assert "| plain_us | rounds |" in text and "| 0.108 | 31 |" in text


def test_shared_inner_names_in_a_list_of_records_are_named_by_their_figure() -> None:
    records = [
        {"tokens": n, "request_ratio": dict(FIGURE), "whole_step_ratio": {**FIGURE, "median": 1.5}}
        for n in (1, 16)
    ]
    text = render_markdown({"timing": records}, ["timing"])
    header = next(line for line in text.splitlines() if line.startswith("| tokens"))
    assert "request_ratio.median" in header and "whole_step_ratio.median" in header
    assert "| 1 | 0.970 | 0.837 | 1.18 | 1.50 | 0.837 | 1.18 |" in text


def test_an_unshared_nested_mapping_still_gives_bare_columns_and_a_legend() -> None:
    records = [{"workload": "fixed", "times": {"median_us": 1.0, "p90_us": 2.0}, "rounds": 5}]
    text = render_markdown({"rows": records}, ["rows"])
    assert "median_us, p90_us: `times`." in text
    assert "| workload | median_us | p90_us | rounds |" in text


def test_a_column_with_one_text_value_in_every_row_moves_above_the_table() -> None:
    records = [{"device": "cpu", "n": 1}, {"device": "cpu", "n": 2}]
    text = render_markdown({"rows": records}, ["rows"])
    assert "device: cpu in every row." in text
    assert "| n |" in text


def test_a_missing_section_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        render_markdown({"rows": []}, ["targets"])


def test_blocks_name_their_sections_and_keep_the_text_around_them() -> None:
    result = {"meta": {"arena": "0.3"}, "rows": [{"n": 1}], "memory": [{"bytes": 4096}]}
    text = "before\n<!-- bench:begin memory -->\nold\n<!-- bench:end -->\nafter\n"
    new = replace_blocks(text, result)
    caption = "`python -m arena bench`: arena 0.3."
    assert new.startswith(f"before\n<!-- bench:begin memory -->\n{caption}")
    assert "| 4096 |" in new and "| n |" not in new and new.endswith("<!-- bench:end -->\nafter\n")


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def _shown(markdown: str) -> list[float]:
    """The numbers in the tables' cells (a list cell such as ``[1048576, 536870912]`` gives
    each of its numbers)."""
    return [float(n) for c in _cells(markdown) for n in re.findall(r"-?\d+(?:\.\d+)?", c)]


def test_every_number_of_the_published_json_reaches_the_page() -> None:
    """docs/bench/cpu.json's checks: each leaf number shown (three significant digits)."""
    result = json.loads((ROOT / "docs" / "bench" / "cpu.json").read_text())
    for name in ("checks", "memory", "targets", "rows"):
        shown = _shown(render_markdown(result, [name]))
        for number in _numbers(result[name]):
            assert [x for x in shown if abs(x - number) <= abs(number) * 0.006], (name, number)


_KEYS = st.sampled_from(["median", "p10", "p90", "us", "rounds", "a", "b"])
_LEAF = st.integers(min_value=0, max_value=10**6)
_RECORD = st.dictionaries(
    st.sampled_from(["x", "y", "z", "median", "rounds"]),
    st.one_of(_LEAF, st.dictionaries(_KEYS, _LEAF, min_size=1, max_size=4)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=4))
def test_no_number_of_a_random_record_list_is_lost(records: list[dict[str, Any]]) -> None:
    """Integers render exactly, so each leaf of each record must be shown as often as it
    occurs (a column overwritten by another would lose one)."""
    text = render_markdown({"s": records}, ["s"])
    shown = sorted(_shown(text))
    for number in _numbers(records):
        assert number in shown, (number, text)
        shown.remove(number)
