"""The adapters' autouse fixture sets JAX's default device to the CPU only where JAX is
imported when the fixture runs: a test that imports JAX in its own body (as
test_adapters.py's and test_adapter_contracts.py's do, through importorskip) ran with
JAX's default device, a GPU on the GPU machine, wherever no module of the same pytest
process had imported JAX at collection (one shard of the sharded suite, or the file run
alone). The fixture imports JAX where it is installed. It acts only where a JAX
accelerator plugin is installed; ARENA_TEST_JAX_ON_HOST=1 makes it act here too."""

from __future__ import annotations

import os
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
    env = {**os.environ, "ARENA_TEST_JAX_ON_HOST": "1"}
    run = subprocess.run(
        [*command, str(PROBE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


def test_an_accelerator_plugin_is_found_without_importing_jax(tmp_path: Path) -> None:
    """The fixture acts where JAX has a GPU or TPU plugin (the ``jax_plugins`` namespace)
    and only there; finding out imports nothing of JAX."""
    code = (
        "import sys; from tests.adapters.conftest import _jax_has_an_accelerator_plugin as f; "
        "print(f(), 'jax' in sys.modules)"
    )
    plain = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    plugin = tmp_path / "jax_plugins" / "xla_cuda13"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    with_plugin = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env
    )
    assert with_plugin.stdout.split() == ["True", "False"]
    assert plain.stdout.split()[1] == "False"
