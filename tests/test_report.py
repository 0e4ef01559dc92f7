"""``python -m arena report``: the figures, the text, the JSON and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import arena
from arena.observe.profilefile import read_profile
from arena.observe.report import analyse, main


def _big(ws: arena.Arena) -> None:
    ws.get_simultaneous(((1000, 100), "float32"), ((3,), "int8"))  # 400000 + 3 bytes


def _small(ws: arena.Arena) -> None:
    ws.get_simultaneous(((100,), "float32"))


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", ubatches=2, framework="numpy", growth="pow2", profile=path) as ws:
        with ws.ubatch(0):
            _small(ws)
            _big(ws)
        with ws.ubatch(1):
            _small(ws)
        ws.lock()
    return path


def test_analysis_names_the_call_site_that_sizes_each_slot(profile: Path) -> None:
    report = analyse(read_profile(profile))
    big = arena.compute_layout((((1000, 100), "float32"), ((3,), "int8"))).total
    capacity = 1 << (big - 1).bit_length()  # pow2 growth
    first, second = report["slots"]
    assert first["sized_by"] == second["sized_by"]
    assert first["sized_by"].endswith(":_big")
    assert first["capacity"] == second["capacity"] == capacity
    assert first["unused_by_policy"] == capacity - big
    assert first["padding"] == big - 400003
    assert second["peak"] == 512 and second["held_for_siblings"] == big - 512
    # ubatch 1 grows once, straight to its sibling's size, at its first request
    assert first["growth_steps"] == 2 and second["growth_steps"] == 1
    (lane,) = report["lanes_summary"]
    assert lane["duplicated"] == capacity and lane["total"] == 2 * capacity
    big_site = next(r for r in report["sites"] if r["site"].endswith(":_big"))
    assert big_site["sizes_slot"] and big_site["share"] == big / capacity
    assert big_site["growth_steps"] == 1 and big_site["layouts"] == 1
    small = [r for r in report["sites"] if r["site"].endswith(":_small")]
    assert len(small) == 2 and not any(r["sizes_slot"] for r in small)


def test_report_prints_tables_and_json(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(profile)]) == 0
    text = capsys.readouterr().out
    assert "<- sizes the slot" in text and "micro-batch duplication" in text
    assert main([str(profile), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(profile) and len(data["slots"]) == 2


def test_report_writes_the_plot(profile: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "report.png"
    assert main([str(profile), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_report_refuses_a_corrupt_or_missing_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main([str(bad)]) == 2
    assert main([str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err
    assert "not a usable profile" in err and "no profile at" in err


def test_python_m_arena_report_dispatches(profile: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "arena", "report", str(profile), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ubatches"] == 2
