"""``import arena`` and a host arena with NumPy views import no other framework."""

from __future__ import annotations

import json
import subprocess
import sys

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
