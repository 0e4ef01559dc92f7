"""The demo, the benchmark harness and the command line (smoke runs: no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arena.tools.bench import format_result, run_bench
from arena.tools.demo import format_report, run_demo


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_demo_keeps_every_guarantee(framework: str) -> None:
    pytest.importorskip(framework)
    report = run_demo("cpu", framework, steps=200, max_tokens=64)
    assert report.ok, format_report(report)
    assert report.allocations_after_lock == 0
    assert report.pointer_changes_after_lock == 0
    assert report.long_lived_view_intact
    capacities = {mb for _, mb, _, _ in report.slot_rows}
    assert len(capacities) == 1  # the sibling was sized like micro-batch 0
    # the consumers are named as callers, not arena's own frames
    assert {site.split(":")[2] for site in report.call_sites} == {"attention", "moe", "indexer"}
    assert all(site.startswith("demo.py:") for site in report.call_sites)
    assert "growth after lock() is refused" in report.refused_growth_message
    text = format_report(report)
    assert "backend allocations after lock (must be 0)" in text and "OK:" in text


def test_bench_quick_run_measures_every_method_and_target() -> None:
    result = run_bench(quick=True, gpu=False)
    frameworks = {row.framework for row in result.rows}
    assert "numpy" in frameworks
    workloads = {row.workload for row in result.rows if row.framework == "numpy"}
    assert {"fixed", "varying", "decode-heavy", "graph buckets", "10^4 layouts"} <= workloads
    for row in result.rows:
        expected = {"arena", "cached", "reference"} | (
            set() if row.framework == "jax" and row.workload != "fixed" else {"alloc"}
        )
        assert set(row.median_us) == expected, (row.workload, row.framework)
        assert all(v > 0 for v in row.median_us.values())
    names = [t["target"] for t in result.targets]
    assert any("allocations after lock" in n for n in names)
    assert any("unlocked hit / locked hit" in n for n in names)
    zero = result.checks["zero_allocations"]
    assert zero["allocations_after_lock"] == 0 and zero["steps"] == 10_000
    growth = [m for m in result.memory if "growth" in m]
    assert growth and growth[0]["peak_over_new_size"] < 1.1
    text = format_result(result)
    assert "arena / reference" in text or "ar/ref" in text


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_command_line(tmp_path: Path) -> None:
    assert "demo" in _run("--help").stdout
    bad = _run("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr
    demo = _run("demo", "--device", "cpu", "--framework", "numpy", "--steps", "50")
    assert demo.returncode == 0, demo.stderr
    assert "allocations after lock (must be 0)" in demo.stdout
    out = tmp_path / "bench.json"
    bench = _run("bench", "--quick", "--no-gpu", "--json", str(out))
    assert bench.returncode == 0, bench.stderr
    data = json.loads(out.read_text())
    assert {"meta", "rows", "targets", "memory", "checks"} <= set(data)
