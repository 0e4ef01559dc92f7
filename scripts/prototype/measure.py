"""Build the compiled-hit prototype (fasthit.c) in a temporary directory and time it
against arena's pure-Python locked hit and three direct np.empty calls, in one process.

Usage: python scripts/prototype/measure.py [--quick]   (needs a C compiler, Python headers)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
import tempfile
import timeit
from pathlib import Path

import numpy as np

import arena


def build(directory: Path) -> object:
    source = Path(__file__).with_name("fasthit.c")
    target = directory / ("fasthit" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            str(source),
            "-o",
            str(target),
            f"-I{sysconfig.get_paths()['include']}",
            f"-I{np.get_include()}",
        ],
        check=True,
    )
    spec = importlib.util.spec_from_file_location("fasthit", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NUMBER = 20_000 if "--quick" in sys.argv else 200_000


def median_us(statement: str, namespace: dict[str, object]) -> float:
    runs = timeit.repeat(statement, globals=namespace, number=NUMBER, repeat=7)
    return sorted(runs)[len(runs) // 2] / NUMBER * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        fasthit = build(Path(directory))
        import ml_dtypes

        # The bench's "fixed" workload, with the dtype objects a NumPy user passes.
        bf16, f32, i32 = ml_dtypes.bfloat16, np.float32, np.int32
        ws = arena.Arena("cpu", framework="numpy")
        front = ws.numpy
        specs = (((256, 32, 128), bf16), ((256, 32), f32), ((256,), i32))
        front.get_simultaneous(*specs)
        views = front.get_simultaneous(*specs)
        ws.lock()
        cache = {specs: [np.ndarray(v.shape, v.dtype, v.base) for v in views]}
        namespace = {
            "front": front,
            "hit": fasthit.hit,
            "cache": cache,
            "np": np,  # type: ignore[attr-defined]
            "bf16": bf16,
            "f32": f32,
            "i32": i32,
        }
        python = median_us(
            "front.get_simultaneous(((256, 32, 128), bf16), ((256, 32), f32), ((256,), i32))",
            namespace,
        )
        compiled = median_us(
            "hit(cache, (((256, 32, 128), bf16), ((256, 32), f32), ((256,), i32)))", namespace
        )
        empty = median_us(
            "np.empty((256, 32, 128), dtype=bf16); np.empty((256, 32), dtype=np.float32); "
            "np.empty((256,), dtype=np.int32)",
            namespace,
        )
        for name, value in (
            ("arena locked hit (pure Python)", python),
            ("compiled prototype", compiled),
        ):
            print(f"{name:<32}{value:.3f} us  ({value / empty:.2f} x np.empty x3)")
        print(f"{'three direct np.empty calls':<32}{empty:.3f} us")


if __name__ == "__main__":
    sys.exit(main())
