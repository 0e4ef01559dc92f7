"""The demo, the benchmark harness and the command line (smoke runs: no timing assertions)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arena.environment import word
from arena.errors import ConfigError
from arena.memory.devices import cuda_device_count
from arena.tools.bench import format_result, format_targets, run_bench
from arena.tools.demo import format_report, run_demo


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
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
    if framework == "jax":
        return  # JAX's consumers are written apart, below the others (no in-place writes)
    # The call sites the docs print are the demo's own (a line moved in demo.py leaves
    # docs/lifecycle.md and docs/sizing.md showing another).
    docs = Path(__file__).resolve().parents[2] / "docs"
    shown = {
        site
        for page in ("lifecycle.md", "sizing.md")
        for site in re.findall(r"demo\.py:\d+:\w+", (docs / page).read_text())
    }
    printed = set(report.call_sites) | set(
        re.findall(r"demo\.py:\d+:\w+", report.refused_growth_message)
    )
    assert shown and shown <= printed, sorted(shown - printed)


def test_bench_quick_run_measures_every_method_and_target() -> None:
    result = run_bench(quick=True, gpu=False)
    frameworks = {row.framework for row in result.rows}
    assert "numpy" in frameworks
    workloads = {row.workload for row in result.rows if row.framework == "numpy"}
    expected_workloads = {"fixed", "varying <32 MiB", "varying", "graph buckets", "2 slots"}
    assert expected_workloads | {"decode-heavy", "10^4 layouts"} <= workloads
    for row in result.rows:
        expected = {"arena", "cached", "reference"} | (
            set() if row.framework == "jax" and row.workload != "fixed" else {"alloc"}
        )
        assert set(row.median_us) == expected, (row.workload, row.framework)
        assert all(v > 0 for v in row.median_us.values())
        for baseline in ("alloc", "ref"):  # paired: a median inside its own spread
            name = f"arena/{baseline}"
            if baseline == "ref" or "alloc" in expected:
                low, mid, high = (
                    row.ratios[f"{name} p10"],
                    row.ratios[name],
                    row.ratios[f"{name} p90"],
                )
                assert 0 < low <= mid <= high, (row.workload, row.framework, name)
    names = [t["target"] for t in result.targets]
    for wanted in ("allocations after lock", "unlocked hit / locked hit", "2-slot hit"):
        assert any(wanted in n for n in names), wanted
    assert any(n.startswith("never-seen 2000-view") for n in names)
    for target in result.targets:
        if target["p10"] is not None:
            assert target["p10"] <= target["measured"] <= target["p90"], target
    zero = result.checks["zero_allocations"]
    assert zero["allocations_after_lock"] == 0 and zero["steps"] == 10_000
    growth = [m for m in result.memory if "growth" in m]
    assert growth and growth[0]["peak_over_new_size"] < 1.1
    assert result.meta["hit path"] in ("compiled", "python")
    text = format_result(result)
    assert "arena / reference" in text and "(p10 to p90)" in text


def test_the_targets_table_keeps_its_columns_aligned_under_long_names() -> None:
    # The torch inference front's decoder-pass targets are longer than the 66 columns the
    # name had: their figures were pushed right of every other line's.
    long = "torch inference front: decoder pass with scopes / on tensors allocated once"
    targets = [
        {
            "target": "torch fixed: arena / alloc",
            "measured": 0.25,
            "p10": 0.2,
            "p90": 0.3,
            "limit": 0.3,
            "met": True,
        },
        {"target": long, "measured": 1.11, "p10": 1.05, "p90": 1.23, "limit": 1.03, "met": False},
        {
            "target": "allocations after lock",
            "measured": 0,
            "p10": None,
            "p90": None,
            "limit": 0,
            "met": True,
        },
    ]
    header, *lines = format_targets(targets)
    assert header.startswith("target ") and header.endswith("limit  result")
    measured = header.index("measured (p10 to p90)") + len("measured (p10 to p90)")  # right-aligned
    result = header.index("result")
    for line in lines:  # each figure ends where its heading does; the verdict starts there
        assert line[measured - 1] != " " and line[measured] == " ", (header, line)
        assert line[result - 3] != " " and line[result - 2 : result] == "  ", (header, line)
        assert line[result:] in ("met", "NOT MET"), (header, line)
    assert lines[1].startswith(long + "  ")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_misspelt_command_is_refused_naming_the_command_it_most_likely_meant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from arena.__main__ import main

    assert main(["reprot"]) == 2
    assert capsys.readouterr().err.startswith(
        "unknown command 'reprot'; did you mean 'report'?\n\nusage: python -m arena"
    )
    assert main(["--verison"]) == 2
    assert "did you mean '--version'?" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2  # nothing close: no guess
    assert capsys.readouterr().err.startswith("unknown command 'frobnicate'\n\n")


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


@pytest.mark.parametrize("pure", [False, True], ids=["default", "ARENA_PURE_PYTHON=1"])
def test_version_names_the_package_the_hit_path_and_python(pure: bool) -> None:
    import arena

    env = {k: v for k, v in os.environ.items() if k != "ARENA_PURE_PYTHON"}
    if pure:
        env["ARENA_PURE_PYTHON"] = "1"
        path = "python, ARENA_PURE_PYTHON is set"
    elif importlib.util.find_spec("arena.views._hit") is not None:
        path = "compiled"
    else:
        path = "python, the extension arena.views._hit is not built"
    result = subprocess.run(
        [sys.executable, "-m", "arena", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    python = platform.python_version()
    assert result.stdout.strip() == f"arena {arena.__version__} (hit path: {path}; Python {python})"


HELP_COMMANDS = [[], ["demo"], ["bench"], ["report"]]


def _options(help_text: str) -> dict[str, str]:
    """Each option of an argparse help, with its help text (continuation lines joined)."""
    options: dict[str, str] = {}
    section = help_text.split("\noptions:\n", 1)[1]
    name = ""
    for line in section.splitlines():
        if line.startswith("  -"):  # "  --plot FILE.png  help text", help maybe on the next line
            spec, _, text = line.strip().partition("  ")
            name = spec.split()[0].rstrip(",")
            options[name] = text.strip()
        elif name and line.startswith("   "):
            options[name] += " " + line.strip()
    return options


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_is_plain_text(command: list[str]) -> None:
    result = _run(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "`" not in result.stdout, result.stdout  # no RST markup shown to users
    options = _options(result.stdout)
    assert "--help" in options or "-h" in options
    if command:  # argparse: every option says what it does and what happens by default
        for name, text in options.items():
            if name not in {"-h", "--help"}:
                assert text and "(default: " in text, (name, text)


def test_demo_offers_every_framework() -> None:
    help_text = _run("demo", "--help").stdout
    assert "{torch,numpy,cupy,jax}" in help_text


def test_bench_render_builds_tables_from_whatever_the_json_holds(tmp_path: Path) -> None:
    data = {
        "meta": {"date": "2026-12-01", "versions": {"numpy": "2.4.6"}},
        "rows": [
            {
                "workload": "fixed",
                "framework": "numpy",
                "device": "cpu",
                "median_us": {"arena": 0.91, "alloc": 0.76, "paired": 1.5},
                "rounds": 3,
            },
            {
                "workload": "varying",
                "framework": "jax",
                "device": "cpu",
                "median_us": {"arena": 14.52},
                "rounds": 3,
            },
        ],
        "targets": [{"target": "numpy fixed", "measured": 0.0469, "limit": 1.0, "met": True}],
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    result = _run("bench", "--render", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        lines[0].startswith("`python -m arena bench`: date 2026-12-01")
        and "numpy 2.4.6" in lines[0]
    )
    assert "| workload | framework | arena | alloc | paired | rounds |" in lines
    assert "| fixed | numpy | 0.910 | 0.760 | 1.50 | 3 |" in lines
    assert "| varying | jax | 14.5 | - | - | 3 |" in lines  # not measured: '-'
    assert "device: cpu in every row." in lines
    assert "| numpy fixed | 0.0469 | 1.00 | yes |" in lines


def test_bench_render_of_a_missing_or_foreign_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    result = _run("bench", "--render", str(missing))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"python -m arena bench: --render {str(missing)!r}: cannot read it "
        "(No such file or directory)\n"
    )
    for text in ("not json", "[1, 2]", '{"rows": 3}'):
        foreign = tmp_path / "foreign.json"
        foreign.write_text(text)
        result = _run("bench", "--render", str(foreign))
        assert result.returncode == 2 and "Traceback" not in result.stderr, text
        wrote = "not a file that `python -m arena bench --json PATH` wrote ("
        assert result.stderr.startswith(
            f"python -m arena bench: --render {str(foreign)!r}: {wrote}"
        ), text
        assert result.stderr.count("\n") == 1, text


@pytest.mark.parametrize(
    ("name", "why"),
    [("none/bench.json", "the folder "), (".", "is a directory; name a file in it")],
)
def test_bench_json_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    why: str,
) -> None:
    """``bench --json none/out.json`` ran the whole bench (minutes), printed its tables and
    then ended in a ``FileNotFoundError`` traceback, the JSON lost; it is refused first."""
    from arena.tools import bench

    ran: list[object] = []
    monkeypatch.setattr(bench, "run_bench", lambda *args, **kwargs: ran.append(args))
    target = str(tmp_path / name)
    assert bench.main(["--quick", "--json", target]) == 2
    err = capsys.readouterr().err
    assert ran == [] and err.count("\n") == 1, err
    assert err.startswith(f"python -m arena bench: --json {target!r}: {why}"), err


def test_bench_json_given_an_empty_path_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json ''`` was refused as 'is a directory' (Path('') is the current folder)."""
    from arena.tools import bench

    monkeypatch.setattr(bench, "run_bench", lambda *args, **kwargs: None)
    assert bench.main(["--quick", "--json", ""]) == 2
    err = capsys.readouterr().err
    assert err == "python -m arena bench: --json '': an empty path; name a file (e.g. bench.json)\n"


def test_bench_json_that_fails_after_the_run_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena.tools import bench

    folder = tmp_path / "out"
    folder.mkdir()

    def run(*args: object, **kwargs: object) -> bench.BenchResult:
        folder.rmdir()  # the folder goes away while the bench runs
        return bench.BenchResult(meta={})

    monkeypatch.setattr(bench, "run_bench", run)
    monkeypatch.setattr(bench, "format_result", lambda result: "the tables")
    assert bench.main(["--quick", "--json", str(folder / "b.json")]) == 1
    out, err = capsys.readouterr()
    assert out == "the tables\n" and err.count("\n") == 1, err
    assert err.startswith("python -m arena bench: --json ") and "cannot write it (" in err


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["demo", "--framework", "cupy", "--device", "cpu"], 2, "ConfigError"),
        (["demo", "--max-tokens", "0"], 2, "must be at least 1"),
        (["demo", "--steps", "-1"], 2, "must be at least 2 (one per micro-batch thread)"),
        # one step ran on micro-batch 0 only, and the demo reported FAILED (rc 1)
        (["demo", "--steps", "1"], 2, "must be at least 2 (one per micro-batch thread)"),
    ],
)
def test_bad_demo_settings_end_in_one_line_not_a_traceback(
    args: list[str], code: int, text: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "arena", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == code
    assert text in result.stderr and "Traceback" not in result.stderr
    # named as argparse's and plan's errors are
    assert result.stderr.splitlines()[-1].startswith("python -m arena demo: "), result.stderr


def test_demo_refuses_fewer_steps_than_micro_batch_threads() -> None:
    """One locked step runs on micro-batch 0 only: micro-batch 1's long-lived view would
    be checked in no step and the demo would report a failure the arena did not have."""
    with pytest.raises(ConfigError, match=r"steps=1: .* at least 2 locked steps"):
        run_demo("cpu", "numpy", steps=1, max_tokens=8)
    assert run_demo("cpu", "numpy", steps=2, max_tokens=8).ok


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is usable here")
def test_bench_gpu_without_a_device_is_one_line_up_front() -> None:
    """``bench --gpu`` on a host without CUDA ran the whole host part, then ended in
    ``No module named 'cupy'``; it is refused before anything is timed, naming why."""
    result = _run("bench", "--gpu", "--quick")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert "gpu=True (--gpu) but no CUDA device is usable here (" in result.stderr
    assert "... " not in result.stderr  # nothing was measured first


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is usable here")
def test_demo_on_a_missing_gpu_names_the_flag_not_only_the_keyword() -> None:
    """``demo --device cuda`` on a host: the library's advice is ``device='cpu'``, which a
    command-line user cannot type; the line also names ``--device cpu``."""
    result = _run("demo", "--device", "cuda")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("python -m arena demo: DeviceUnavailableError: ")
    assert "(on the command line: --device cpu, or leave --device out)" in result.stderr


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is usable here")
def test_demo_on_a_missing_gpu_names_the_spelling_given() -> None:
    """``demo --device gpu`` said "cuda:0 is not available" without the 'gpu' typed (the
    API's message names it; found following the README as a new user)."""
    result = _run("demo", "--device", "gpu")
    assert result.returncode == 2
    assert "cuda:0 (device='gpu') is not available" in result.stderr


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is usable here")
def test_demo_with_a_framework_that_cannot_view_the_host_names_the_flag() -> None:
    """``demo --framework cupy`` on a host: the advice was ``framework='torch'``, a keyword
    a command-line user cannot type; the line also names ``--framework``."""
    result = _run("demo", "--framework", "cupy", "--steps", "2")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("python -m arena demo: ConfigError: framework='cupy' ")
    assert result.stderr.endswith(
        " (on the command line: --framework NAME, or leave --framework out)\n"
    )


@pytest.mark.parametrize("max_tokens", [1, 4, 7])
def test_demo_with_fewer_tokens_than_the_sibling_warm_up_keeps_its_guarantees(
    max_tokens: int,
) -> None:
    """``--max-tokens`` 1 to 7 was accepted, and micro-batch 1's fixed warm-up of 8 tokens
    made it the larger sibling: ``lock()`` then grew micro-batch 0 under its long-lived
    view and the demo reported FAILED for an arena that kept every promise."""
    report = run_demo("cpu", "numpy", steps=2, max_tokens=max_tokens)
    assert report.long_lived_view_intact, format_report(report)
    assert report.ok, format_report(report)


@pytest.mark.skipif(
    word(os.environ.get("ARENA_SOURCE", "")) == "virtual",
    reason="ARENA_SOURCE=virtual: the test fills HostSource's blocks, which the "
    "fixed-address source does not allocate through",
)
def test_the_demo_reads_no_persistent_byte_it_did_not_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The indexer's persistent key cache was not zero-initialised: its ``+= 1`` read
    whatever the memory held, and where that was a signalling NaN NumPy warned "invalid
    value encountered in scalar add" (a fresh clone's suite failed on it under
    ``filterwarnings=error``). Every host block here starts filled with float32 signalling
    NaNs: the demo must not read one."""
    from arena.memory.sources import HostSource

    allocate = HostSource.allocate
    filled: list[int] = []

    def stale(self: HostSource, nbytes: int) -> Any:
        block = allocate(self, nbytes)
        words = (ctypes.c_uint32 * (block.nbytes // 4)).from_address(block.ptr)
        np.ctypeslib.as_array(words)[:] = 0x7FA00000  # a float32 signalling NaN
        filled.append(nbytes)
        return block

    monkeypatch.setattr(HostSource, "allocate", stale)
    report = run_demo("cpu", "numpy", steps=4, max_tokens=8)
    assert filled and "growth after lock() is refused" in report.refused_growth_message
