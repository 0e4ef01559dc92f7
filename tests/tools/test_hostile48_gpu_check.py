"""scripts/gpu-check's machinery, run on the CPU with no time budget (every step is
recorded as not run, so nothing is installed or tested): a previous run's results in the
output folder are not merged into this run's summary, and a shard count that is not a
positive number falls back to the default rather than running no shard."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None,
    reason="scripts/gpu-check needs bash and coreutils' timeout",
)


def _run(out: Path, shards: str) -> tuple[dict[str, object], str]:
    env = dict(
        os.environ,
        OUT=str(out),
        PYTHON=sys.executable,
        GPU_CHECK_BUDGET_S="1",  # no step runs
        GPU_CHECK_SHARDS=shards,
        TMPDIR=str(out),  # the source-tree shim's folder
    )
    subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, timeout=120, check=False)
    summary = json.loads((out / "summary.json").read_text())
    return summary, (out / "gpu-check.log").read_text()


def test_a_previous_runs_junit_files_are_not_merged_into_this_runs_summary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "gc"
    out.mkdir()
    stale = (
        '<testsuite tests="9" failures="9" errors="0" skipped="0">'
        '<testcase classname="stale" name="old"><failure/></testcase></testsuite>'
    )
    (out / "junit-all-5.xml").write_text(stale)  # a shard of a run with more shards
    (out / "junit-gpu.xml").write_text(stale)
    summary, _ = _run(out, "2")
    assert "all_tests" not in summary and "gpu_tests" not in summary, summary
    assert not (out / "junit-all-5.xml").exists()
    steps = summary["steps"]
    assert isinstance(steps, dict) and steps["all-tests"]["exit"] == "not-run"


@pytest.mark.parametrize("shards", ["0", "two", "-1"])
def test_a_shard_count_that_is_not_positive_falls_back_to_the_default(
    tmp_path: Path, shards: str
) -> None:
    _, log = _run(tmp_path, shards)
    assert f"GPU_CHECK_SHARDS={shards} is not a positive count" in log
