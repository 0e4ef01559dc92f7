"""The compiled-hit prototype (scripts/prototype) builds and measures (no timing asserted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "prototype" / "measure.py"


def test_the_compiled_hit_prototype_builds_and_reports() -> None:
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build the prototype")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("needs the Python headers to build the prototype")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "compiled prototype" in run.stdout and "np.empty x3" in run.stdout
