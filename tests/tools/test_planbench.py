"""The planning bench (quick mode): byte figures and their order, the dry run, the output.

No timing assertions: the timing is only checked for its shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.base.layout import compute_layout
from arena.planning import plan_offsets
from arena.tools.decoder import LLAMA_8B, DecoderShape, dry_bytes, plain_specs
from arena.tools.planbench import (
    format_offsets,
    format_planning,
    main,
    measure_bytes,
    random_blocks,
    run_planning_bench,
    time_offsets,
)


@pytest.fixture(scope="module")
def result() -> dict[str, object]:
    return run_planning_bench(quick=True)


def test_steps_need_no_more_than_scopes_and_scopes_no_more_than_plain(
    result: dict[str, object],
) -> None:
    rows = result["bytes"]
    assert isinstance(rows, list)
    assert [row["tokens"] for row in rows] == [1, 16, 256, 4096]
    for row in rows:
        assert row["load"] <= row["steps"] <= row["scopes"] <= row["plain"], row
        assert row["steps"] <= 1.05 * row["load"], row  # chained layers: the plan meets LOAD
        assert row["scopes"] < row["plain"] / 3, row
        if row["measured"]:
            assert row["steps_recording"] >= row["steps"]


def test_the_measured_figures_are_the_dry_runs(result: dict[str, object]) -> None:
    rows = result["bytes"]
    assert isinstance(rows, list)
    for row in rows:
        dry = row["dry"]
        assert (row["plain"], row["scopes"], row["load"]) == (
            dry["plain"],
            dry["scopes"],
            dry["load"],
        )
        assert row["steps"] <= dry["steps"]  # a step keeps its first fit when that is smaller


def test_the_figures_follow_the_layer_sizes() -> None:
    tokens = 256
    bf16 = 2
    hidden, inter = LLAMA_8B.hidden * tokens * bf16, LLAMA_8B.intermediate * tokens * bf16
    kv = LLAMA_8B.kv_heads * LLAMA_8B.head_dim * tokens * bf16
    figures = dry_bytes(LLAMA_8B, tokens)
    # Every layer: six hidden-sized views, q and the attention output, k and v, and the
    # three MLP views; and the embedding output.
    assert figures["plain"] == 4 * (8 * hidden + 2 * kv + 3 * inter) + hidden
    # The MLP's peak: the residual h, gate, up and their product.
    assert figures["load"] == hidden + 3 * inter
    # Two residual buffers, h, and the MLP scope (hn, gate, up, act, down).
    assert figures["scopes"] == 3 * hidden + 2 * hidden + 3 * inter
    specs = plain_specs(LLAMA_8B, tokens)
    assert len(specs) == 1 + 4 * 13 and compute_layout(tuple(specs)).total == figures["plain"]


def test_a_refused_allocation_falls_back_to_the_dry_run() -> None:
    row = measure_bytes(LLAMA_8B, 4096, max_bytes=64 << 20)
    assert row["measured"] is False and "dry run" in row["note"]
    assert {k: row[k] for k in ("plain", "scopes", "steps", "load")} == row["dry"]
    assert "(dry run: the host refused the memory)" in format_planning(
        {
            "shape": LLAMA_8B.describe(),
            "bytes": [row],
            "timing": _timing(),
        }
    )


def _timing() -> dict[str, object]:
    return {
        "tokens": 16,
        "requests_per_step": 41,
        "releases_per_step": 32,
        "rounds": 1,
        "steps_per_round": 1,
        "clock_overhead_us": 0.1,
        "step_request_us": 1.0,
        "plain_request_us": 1.0,
        "request_ratio": {"median": 1.0, "p10": 1.0, "p90": 1.0},
        "whole_step_ratio": {"median": 2.0, "p10": 2.0, "p90": 2.0},
        "target": 1.2,
        "allocations_after_lock": 0,
    }


def test_the_timing_pairs_a_replayed_step_with_plain_requests(result: dict[str, object]) -> None:
    timing = result["timing"]
    assert isinstance(timing, dict)
    assert timing["requests_per_step"] == 41 and timing["releases_per_step"] == 32
    assert timing["allocations_after_lock"] == 0
    for key in ("request_ratio", "whole_step_ratio"):
        spread = timing[key]
        assert 0 < spread["p10"] <= spread["median"] <= spread["p90"]
    assert timing["step_request_us"] > 0 and timing["plain_request_us"] > 0


def test_the_output_and_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    assert main(["--quick", "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert "plain MB" in text and "steps/LOAD" in text and "paired rounds" in text
    data = json.loads(path.read_text())
    assert data["quick"] is True and len(data["bytes"]) == 4
    assert data["shape"] == LLAMA_8B.describe()


def test_a_small_shape_runs_the_same_program() -> None:
    small = DecoderShape(hidden=64, intermediate=224, heads=4, kv_heads=2, head_dim=16, layers=2)
    row = measure_bytes(small, 8)
    assert row["measured"] and row["load"] <= row["steps"] <= row["scopes"] <= row["plain"]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_the_demo_shows_what_the_plan_saves(framework: str) -> None:
    pytest.importorskip(framework)
    from arena.tools.plandemo import DEMO_LAYERS, format_planning_demo, run_planning_demo

    report = run_planning_demo("cpu", framework, max_tokens=64)
    dry = dry_bytes(DEMO_LAYERS, 64)
    assert report.plain_bytes == dry["plain"] and report.load_bytes == dry["load"]
    assert report.step_bytes == report.load_bytes < report.plain_bytes / 5
    assert report.allocations_after_lock == 0 and report.pointer_changes == 0 and report.ok
    text = format_planning_demo(report)
    saved = report.plain_bytes - report.step_bytes
    assert f"{saved / (1 << 20):.2f}" in text and "OK: the plan saves memory" in text


def test_random_blocks_are_the_documented_sets() -> None:
    """Sizes 1 byte to 1 MiB, first use over n steps, lives of 1 to span + 1 steps; the
    same blocks for the same seed."""
    blocks = random_blocks(2000, 40, seed=3)
    assert blocks == random_blocks(2000, 40, seed=3) != random_blocks(2000, 40, seed=4)
    assert all(1 <= size <= 1 << 20 and 0 <= first < 2000 for size, first, _ in blocks)
    assert {last - first for _, first, last in blocks} == set(range(41))


def test_offsets_timing_reports_each_set(capsys: pytest.CaptureFixture[str]) -> None:
    """``time_offsets`` plans each set (the plan's ratio and order are the planner's) and
    ``--offsets`` prints them; no timing assertion."""
    result = time_offsets(((300, 5), (300, 30)))
    assert result["placement"] in ("compiled", "python")
    assert [(row["blocks"], row["span"]) for row in result["rows"]] == [(300, 5), (300, 30)]
    for row in result["rows"]:
        plan = plan_offsets(random_blocks(row["blocks"], row["span"]))
        assert (row["total_bytes"], row["strategy"]) == (plan.total_bytes, plan.strategy)
        assert row["ratio"] == plan.ratio >= 1.0
        assert row["cpu_s"] >= 0.0
    text = format_offsets(result)
    assert "plan_offsets without a limit" in text and "load average" in text
    assert text.splitlines()[3].split()[:2] == ["300", "31"]
