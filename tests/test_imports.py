"""``import arena`` and a host arena with NumPy views import no other framework, and counting
CUDA devices imports torch only where CuPy is missing or torch is already imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys
import arena
after_import = sorted(m for m in ("torch", "cupy", "jax", "jaxlib") if m in sys.modules)
a = arena.Arena("cpu", framework="numpy", ubatches=2)
x, = a.numpy.get_simultaneous(((4, 4), "float32"))
a.get_persistent("p", (3,), "bfloat16" if "ml_dtypes" in sys.modules else "float16")
a.lock(); a.get_simultaneous(((2,), "int8")); a.stats(); a.close()
after_use = sorted(m for m in ("torch", "cupy", "jax", "jaxlib") if m in sys.modules)
print(json.dumps([after_import, after_use]))
"""


def test_import_and_host_use_import_no_framework() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    after_import, after_use = json.loads(out.strip().splitlines()[-1])
    assert after_import == []
    assert after_use == []


FAKE_CUPY = """
class CUDARuntimeError(RuntimeError):
    pass
class _Runtime:
    CUDARuntimeError = CUDARuntimeError
    @staticmethod
    def getDeviceCount():
        return {count}
class cuda:
    runtime = _Runtime
"""

COUNT = """
import json, sys
import arena
from arena.memory.devices import cuda_device_count, default_device
print(json.dumps([cuda_device_count(), str(default_device()), "torch" in sys.modules]))
"""


@pytest.mark.parametrize("count", [0, 1])
def test_counting_devices_never_imports_torch_where_cupy_is_installed(
    tmp_path: Path, count: int
) -> None:
    """A stand-in CuPy package answers; torch (installed or not) is never imported to ask."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY.format(count=count))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", COUNT], capture_output=True, text=True, check=True, env=env
    ).stdout
    devices, default, torch_imported = json.loads(out.strip().splitlines()[-1])
    assert devices == count
    assert default == ("cuda:0" if count else "cpu")
    assert torch_imported is False
