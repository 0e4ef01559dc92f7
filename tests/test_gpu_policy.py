"""Under ARENA_REQUIRE_GPU=1 a run cannot pass by skipping (tests/conftest.py).

Runs pytest in a subprocess on a small suite that uses this project's conftest: a
module-level ``importorskip`` of a missing module, an adapter-style ImportError-to-skip, a
listed skip and a ``gpu`` test. Nothing here needs a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

HERE = Path(__file__).resolve().parent

SUITE = {
    "test_module_skip.py": """
import pytest
pytest.importorskip("no_such_framework_for_arena")

def test_never_runs():
    pass
""",
    "test_skips.py": """
import pytest

def test_listed_skip():
    pytest.skip("a GPU is visible")

def test_adapter_cannot_load():
    pytest.skip("arena.adapters.cupy cannot load: no module named cupy")

def test_passes():
    pass

@pytest.mark.gpu
def test_needs_gpu():
    pass
""",
}


def _run(tmp_path: Path, require: str) -> dict[str, str]:
    """Outcome per test (``"passed"``, ``"skipped"``, ``"failed"``, ``"error"``), by name."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a CUDA device\n")
    env = {**os.environ, "ARENA_REQUIRE_GPU": require}
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            f"--junitxml={junit}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    outcomes = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = case.get("name") or case.get("classname", "")
        kinds = [child.tag for child in case if child.tag in ("skipped", "failure", "error")]
        outcomes[name] = {"skipped": "skipped", "failure": "failed", "error": "error"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return outcomes


def test_a_gpu_run_turns_unlisted_skips_into_failures(tmp_path: Path) -> None:
    from arena.memory.devices import cuda_device_count

    outcomes = _run(tmp_path, "1")
    assert outcomes["test_listed_skip"] == "skipped"
    assert outcomes["test_adapter_cannot_load"] == "failed"
    assert outcomes["test_passes"] == "passed"
    assert outcomes["test_module_skip"] == "error"  # the module-level importorskip
    if cuda_device_count() == 0:
        assert outcomes["test_needs_gpu"] == "error"  # fails in setup


def test_a_cpu_run_keeps_its_skips(tmp_path: Path) -> None:
    from arena.memory.devices import cuda_device_count

    outcomes = _run(tmp_path, "")
    assert outcomes["test_adapter_cannot_load"] == "skipped"
    assert outcomes["test_module_skip"] == "skipped"
    assert outcomes["test_passes"] == "passed"
    if cuda_device_count() == 0:
        assert outcomes["test_needs_gpu"] == "skipped"


def test_a_gpu_run_accepts_the_skip_of_what_cpython_3_12_compiles_out() -> None:
    """The step rows' and scope memo's tests skip on CPython 3.12 on with one reason
    (tests/extensions.py), listed as it is: a GPU run on 3.12 refused them before."""
    from tests.conftest import ALLOWED_GPU_SKIPS
    from tests.extensions import NO_DICT_VERSION_TAGS

    assert NO_DICT_VERSION_TAGS in ALLOWED_GPU_SKIPS
