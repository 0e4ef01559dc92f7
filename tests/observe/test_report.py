"""``python -m arena report``: the figures, the text, the JSON and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def _stepped(path: Path) -> Path:
    """A run whose step's recording grew the slot past its plan."""
    from tests.observe.test_profile_steps import forward

    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        forward(ws, 100)
        forward(ws, 100)
        ws.lock()
    return path


def test_capacity_against_load_per_slot(profile: Path, tmp_path: Path) -> None:
    first, second = analyse(read_profile(profile))["slots"]
    big = arena.compute_layout((((1000, 100), "float32"), ((3,), "int8"))).total
    # Plain requests: LOAD is the largest request; nothing was planned.
    assert first["load"] == big and first["capacity_over_load"] == first["capacity"] / big
    assert second["load"] == 512 and first["planned"] == second["planned"] == 0
    assert first["planned_over_load"] is None
    (slot,) = analyse(read_profile(_stepped(tmp_path / "s.json")))["slots"]
    assert slot["capacity"] > slot["planned"] == slot["load"] > 0
    assert slot["planned_over_load"] == 1.0
    assert slot["capacity_over_load"] == slot["capacity"] / slot["load"] > 1.0


def test_report_shows_capacity_against_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _stepped(tmp_path / "s.json")
    (slot,) = read_profile(path)["slots"]
    assert main([str(path)]) == 0
    text = capsys.readouterr().out
    table = text.split("capacity against LOAD (MB)\n")[1].splitlines()
    assert table[0].split() == ["slot", "capacity", "LOAD", "cap/LOAD", "planned", "plan/LOAD"]
    mb = 1024 * 1024
    ratio = slot["capacity"] / slot["load"]
    assert table[1].split() == [
        "u0",
        "l0",
        f"{slot['capacity'] / mb:.2f}",
        f"{slot['load'] / mb:.2f}",
        f"{ratio:.2f}",
        f"{slot['planned'] / mb:.2f}",
        "1.00",
    ]
    assert main([str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["slots"]
    assert row["load"] == slot["load"] and row["planned"] == slot["planned"]
    assert row["capacity_over_load"] == ratio and row["planned_over_load"] == 1.0


def test_a_profile_without_load_reports_it_as_not_recorded(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = read_profile(profile)
    for slot in old["slots"]:
        del slot["load"], slot["planned"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert main([str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slots"]
    assert all(r["load"] is None and r["capacity_over_load"] is None for r in rows)
    assert main([str(path)]) == 0
    assert "(not recorded: the profile was written before LOAD was)" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    png = tmp_path / "old.png"
    assert main([str(path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_draws_capacity_against_load(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from arena.observe import plot

    drawn: list[Any] = []
    original = plot._against_load

    def spy(ax: Any, slots: list[dict[str, Any]]) -> None:
        original(ax, slots)
        drawn.append(([bar.get_width() for bar in ax.patches], [t.get_text() for t in ax.texts]))

    report = analyse(read_profile(_stepped(tmp_path / "s.json")))
    (slot,) = report["slots"]
    plot._against_load = spy  # type: ignore[assignment]
    try:
        plot.plot_report(report, str(tmp_path / "s.png"))
    finally:
        plot._against_load = original  # type: ignore[assignment]
    plt.close("all")
    ((widths, texts),) = drawn
    mb = 1024 * 1024
    assert widths == [slot["capacity"] / mb, slot["planned"] / mb]
    assert f"LOAD {slot['load'] / mb:.2f} MB " in texts
    assert any("(1.00 x LOAD)" in t and t.startswith(" planned") for t in texts)


def _rank_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int) -> Path:
    """Rank ``rank`` of a 3-rank job (the launcher's RANK and WORLD_SIZE) warms up on
    ``rank + 1`` times rank 0's rows."""
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "3")
    path = tmp_path / f"rank{rank}.json"
    with arena.Arena("cpu", framework="numpy", ubatches=2, profile=path) as ws:
        ws.get_simultaneous(((1024 * (rank + 1),), "float32"))
        ws.lock()
    return path


def test_a_ranks_profile_records_its_rank_and_world_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = read_profile(_rank_profile(tmp_path, monkeypatch, 2))
    assert profile["ranks"] == [2] and profile["world"] == 3


def test_report_over_several_ranks_profiles_shows_the_per_rank_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [str(_rank_profile(tmp_path, monkeypatch, rank)) for rank in range(3)]
    assert main([*paths, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert [p["ranks"] for p in figures["profiles"]] == [[0], [1], [2]]
    first = figures["slots"][0]
    assert first["capacity"] == [4096, 8192, 12288]
    assert (first["capacity_min"], first["capacity_max"]) == (4096, 12288)
    assert figures["slots"][1]["capacity"] == [4096, 8192, 12288]  # lock() sized ubatch 1
    assert main(paths) == 0
    text = capsys.readouterr().out
    assert "per-rank spread over 3 profiles (world size 3)" in text
    assert "u0 l0   capacity" in text and "3.00" in text


def test_report_refuses_to_compare_profiles_of_other_configurations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _rank_profile(tmp_path, monkeypatch, 0)
    other = tmp_path / "other.json"
    with arena.Arena("cpu", framework="numpy", profile=other) as ws:
        ws.get_simultaneous(((16,), "float32"))
        ws.lock()
    assert main([str(one), str(other)]) == 2
    assert "differ in (ubatches, lanes)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("missing/report.png", "does not exist"),
        ("report.bmpx", "unknown file type .bmpx"),
        ("report", "no file type"),
    ],
)
def test_a_plot_that_cannot_be_written_is_one_line_not_a_traceback(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, why: str
) -> None:
    assert main([str(profile), "--plot", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "not json",
        "not a profile",
        "alignment 3",
        "two configurations",
        "plot folder",
        "plot type",
        "plot unwritable",
    ],
)
def test_every_report_error_is_one_line_that_names_the_command(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """As ``python -m arena plan``'s errors do, so that a line in an engine's log says
    which command refused what (they read ``--plot 'x': ...`` or ``'p.json' is not ...``)."""
    bad = tmp_path / "bad.json"
    args = {
        "missing": [str(tmp_path / "missing.json")],
        "not json": [str(bad)],
        "not a profile": [str(bad)],
        "alignment 3": [str(profile)],
        "two configurations": [str(profile), str(bad)],
        "plot folder": [str(profile), "--plot", str(tmp_path / "none" / "r.png")],
        "plot type": [str(profile), "--plot", str(tmp_path / "r.bmpx")],
        "plot unwritable": [str(profile), "--plot", str(tmp_path / "dir.png")],
    }[case]
    bad.write_text({"not json": "{", "not a profile": '{"a": 1}'}.get(case, ""))
    if case == "alignment 3":
        profile.write_text(json.dumps({**json.loads(profile.read_text()), "alignment": 3}))
    if case == "two configurations":
        with arena.Arena("cpu", framework="numpy", profile=bad) as ws:
            ws.get_simultaneous(((16,), "float32"))
            ws.lock()
    if case == "plot unwritable":
        (tmp_path / "dir.png").mkdir()  # savefig cannot write over a directory
    assert main(args) in (1, 2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m arena report: "), err


def test_report_escapes_control_characters_of_a_profile(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(profile.read_text())
    data["sites"][0]["site"] = "evil\x1b[2J.py:1:f"
    data["device"] = "cpu\x07"
    profile.write_text(json.dumps(data))
    assert main([str(profile)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b[2J.py:1:f" in out and "cpu\\x07" in out


def test_report_refuses_an_alignment_that_is_not_a_power_of_two(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(profile.read_text())
    data["alignment"] = 3
    profile.write_text(json.dumps(data))
    assert main([str(profile)]) == 2
    assert "power of two, found 3" in capsys.readouterr().err


def test_report_shows_the_library_workspaces_the_profile_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ws.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_library_workspace("flashinfer", 4096)
        ws.get_simultaneous(((16,), "float32"))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "library workspaces and Triton blocks" in out
    assert "'flashinfer'" in out and "library" in out
    assert main([str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["workspaces"]
    assert [(w["kind"], w["key"], w["bytes"]) for w in shown] == [("library", "flashinfer", 4096)]


def test_report_names_the_per_arena_profiles_beside_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "engine.json"
    monkeypatch.setenv("ARENA_PROFILE", str(path))
    with (
        arena.Arena("cpu", framework="numpy") as ws,
        arena.Arena("cpu", framework="numpy", name="draft") as draft,
    ):
        ws.get_simultaneous(((16,), "float32"))
        draft.get_simultaneous(((16,), "float32"))
    assert main([str(path)]) == 0  # the first arena's, and the others named
    assert "beside it (ARENA_PROFILE): engine.draft.cpu-1x1-a256.json" in capsys.readouterr().out
    path.unlink()
    assert main([str(path)]) == 1
    assert "engine.draft.cpu-1x1-a256.json" in capsys.readouterr().err


def test_demo_refuses_zero_steps_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    from arena.tools.demo import main as demo

    with pytest.raises(SystemExit) as stop:
        demo(["--device", "cpu", "--framework", "numpy", "--steps", "0"])
    assert stop.value.code == 2
    # at least 2: one locked step per micro-batch thread (1 reported FAILED; see test_cli)
    err = capsys.readouterr().err
    assert "argument --steps: must be at least 2 (one per micro-batch thread), got 0" in err


def test_one_micro_batch_reads_as_one_buffer_without_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It read "lane 0: 1 micro-batch buffers hold 0.00 MB, of which 0.00 MB are copies
    for the other micro-batches"."""
    path = tmp_path / "one.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        _big(ws)
        ws.lock()
    assert main([str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[-1] == "  lane 0: one micro-batch buffer holds 0.38 MB, no copies (one micro-batch)"
    )
