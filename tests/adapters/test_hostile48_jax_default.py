"""The adapters' autouse fixture sets JAX's default device to the CPU only where JAX is
imported when the fixture runs: a test that imports JAX in its own body (as
test_adapters.py's and test_adapter_contracts.py's do, through importorskip) ran with
JAX's default device, a GPU on the GPU machine, wherever no module of the same pytest
process had imported JAX at collection (one shard of the sharded suite, or the file run
alone). The fixture imports JAX where it is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

PROBE = Path(__file__).with_name("jax_default_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def test_a_test_that_imports_jax_itself_still_computes_on_the_host() -> None:
    config = ["--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *config]
    run = subprocess.run(
        [*command, str(PROBE)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout
