"""``python -m arena bench``: the locked hot path against the allocation it replaces.

For every installed framework and for 1, 3 and 8 views of realistic shapes and mixed
dtypes, in one process, it times (median and 10th-90th percentile over repetitions):

* ``arena``: a locked ``get_simultaneous`` (fresh view objects);
* ``cached``: the same through a cached front (the very same objects);
* ``alloc``: the framework's own allocation of the same shapes (``torch.empty``, ...);
* ``reference``: what vLLM's WorkspaceManager does per call (running sums, then slice +
  dtype view + reshape of a ``uint8`` buffer; for JAX, a DLPack import of each view).

Ratios are taken within the run, so they compare like with like on the same machine.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import itertools
import json
import math
import platform
import statistics
import subprocess
import sys
import time
import timeit
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._version import __version__
from .core import Arena
from .devices import cuda_device_count
from .layout import _MEMO, compute_layout, round_up
from .observe import MB

__all__ = ["BenchResult", "Row", "main", "run_bench"]

TOKENS, HIDDEN, HEADS, HEAD_DIM = 256, 4096, 32, 128

#: Realistic requests: (name, specs with dtype names).
WORKLOADS: dict[int, list[tuple[tuple[int, ...], str]]] = {
    1: [((TOKENS, HIDDEN), "bfloat16")],
    3: [
        ((TOKENS, HEADS, HEAD_DIM), "bfloat16"),
        ((TOKENS, HEADS), "float32"),
        ((TOKENS,), "int32"),
    ],
    8: [
        ((TOKENS * 2, 2 * HIDDEN), "bfloat16"),
        ((TOKENS * 2, HIDDEN), "bfloat16"),
        ((TOKENS, HIDDEN), "bfloat16"),
        ((TOKENS, 2), "int32"),
        ((TOKENS, 2), "float32"),
        ((TOKENS * 2,), "int32"),
        ((64,), "int32"),
        ((TOKENS, 256), "float32"),
    ],
}


@dataclass
class Row:
    """Timings of one (framework, device, view count), in microseconds per call."""

    framework: str
    device: str
    views: int
    median_us: dict[str, float]
    spread_us: dict[str, tuple[float, float]]

    def ratio(self, numerator: str, denominator: str) -> float:
        """``median[numerator] / median[denominator]`` (nan when either is missing)."""
        top, bottom = self.median_us.get(numerator), self.median_us.get(denominator)
        return top / bottom if top and bottom else math.nan


@dataclass
class BenchResult:
    """Everything one run measured."""

    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)


def _native_specs(framework: str, specs: list[tuple[tuple[int, ...], str]]) -> tuple[Any, ...]:
    """The specs with the framework's own dtype objects, as its users would pass them."""
    if framework == "torch":
        import torch

        return tuple((s, getattr(torch, d)) for s, d in specs)
    from .dtypes import resolve_dtype

    numpy_adapter = importlib.import_module("arena.adapters.numpy")

    if framework in {"jax", "cupy"}:
        # NumPy cannot export bfloat16 through DLPack (the JAX baseline imports each view)
        # and CuPy's bfloat16 is experimental: these workloads use float16 (same size).
        specs = [(s, "float16" if d == "bfloat16" else d) for s, d in specs]
    return tuple((s, numpy_adapter.native_dtype(resolve_dtype(d))) for s, d in specs)


def _reference(framework: str, buffer: Any, specs: Sequence[tuple[Any, Any]]) -> list[Any]:
    """vLLM's per-call arithmetic and slicing (a JAX import per view for JAX)."""
    actual = [math.prod(s) * d.itemsize for s, d in specs]
    aligned = [round_up(a, 256) for a in actual]
    offsets = list(itertools.accumulate([0, *aligned[:-1]]))
    if framework == "jax":
        import jax

        return [
            jax.dlpack.from_dlpack(
                buffer[offsets[i] : offsets[i] + actual[i]].view(specs[i][1]).reshape(specs[i][0])
            )
            for i in range(len(specs))
        ]
    return [
        buffer[offsets[i] : offsets[i] + actual[i]].view(specs[i][1]).reshape(specs[i][0])
        for i in range(len(specs))
    ]


def _allocator(framework: str, device: str) -> Callable[[Sequence[tuple[Any, Any]]], list[Any]]:
    if framework == "torch":
        import torch

        dev = torch.device(device if device != "cpu" else "cpu")
        return lambda specs: [torch.empty(s, dtype=d, device=dev) for s, d in specs]
    if framework == "numpy":
        import numpy as np

        return lambda specs: [np.empty(s, dtype=d) for s, d in specs]
    if framework == "cupy":
        import cupy

        return lambda specs: [cupy.empty(s, dtype=d) for s, d in specs]
    import jax.numpy as jnp

    return lambda specs: [jnp.empty(s, dtype=d) for s, d in specs]


def _time(fn: Callable[[], Any], number: int, repeat: int) -> tuple[float, float, float]:
    fn()
    samples = sorted(t / number * 1e6 for t in timeit.Timer(fn).repeat(repeat, number))
    low = samples[max(0, len(samples) // 10)]
    high = samples[min(len(samples) - 1, len(samples) * 9 // 10)]
    return statistics.median(samples), low, high


def _bench_one(framework: str, device: str, views: int, number: int, repeat: int) -> Row:
    specs = _native_specs(framework, WORKLOADS[views])
    arena = Arena(device, framework="numpy" if device == "cpu" else "cupy")
    try:
        front = arena.front(framework)
        cached = arena.front(framework, cached=True)
        front.get_simultaneous(*specs)
        cached.get_simultaneous(*specs)
        arena.lock()
        # The reference manager owns a buffer of its own, as vLLM's does.
        buffer = arena.source.allocate(arena.stats().slots[0].capacity).owner
        allocate = _allocator(framework, device)
        if framework == "torch":
            from torch.utils.dlpack import from_dlpack

            buffer = from_dlpack(buffer)
        sync = _synchroniser(framework, device)
        candidates: dict[str, Callable[[], Any]] = {
            "arena": lambda: front.get_simultaneous(*specs),
            "cached": lambda: cached.get_simultaneous(*specs),
            "alloc": lambda: sync(allocate(specs)),
            "reference": lambda: _reference(framework, buffer, specs),
        }
        medians, spreads = {}, {}
        for name, fn in candidates.items():
            median, low, high = _time(fn, number, repeat)
            medians[name], spreads[name] = median, (low, high)
        return Row(framework, device, views, medians, spreads)
    finally:
        arena.close()


def _synchroniser(framework: str, device: str) -> Callable[[Any], Any]:
    """Allocation timings include the work the framework defers (JAX dispatch)."""
    if framework == "jax":
        import jax

        return jax.block_until_ready  # type: ignore[no-any-return,unused-ignore]
    return lambda x: x


def _frameworks(device: str) -> list[str]:
    names = ["numpy", "torch", "jax"] if device == "cpu" else ["cupy", "torch"]
    found = []
    for name in names:
        if importlib.util.find_spec(name) is None:
            continue
        if name == "numpy" and importlib.util.find_spec("ml_dtypes") is None:
            continue  # bfloat16 workloads need ml_dtypes on the NumPy side
        if name == "torch" and device != "cpu":
            import torch

            if not torch.cuda.is_available():
                continue
        found.append(name)
    return found


def _zero_allocations_after_lock(steps: int) -> dict[str, Any]:
    import random

    with Arena("cpu", ubatches=2, framework="numpy") as arena:
        arena.get_simultaneous(((TOKENS, HIDDEN), "float32"), ((TOKENS,), "int32"))
        arena.lock()
        before = arena.stats().allocations
        rng = random.Random(0)
        for step in range(steps):
            with arena.ubatch(step % 2):
                tokens = rng.randint(1, TOKENS)
                arena.get_simultaneous(((tokens, HIDDEN), "float32"), ((tokens,), "int32"))
        stats = arena.stats()
    return {"steps": steps, "allocations_after_lock": stats.allocations - before}


def _layout_memo(number: int) -> dict[str, float]:
    specs = tuple((s, d) for s, d in WORKLOADS[8])
    compute_layout(specs)
    hit = min(timeit.Timer(lambda: compute_layout(specs)).repeat(5, number)) / number * 1e6

    def miss() -> None:
        _MEMO.clear()
        compute_layout(specs)

    cold = min(timeit.Timer(miss).repeat(5, max(1, number // 10))) / max(1, number // 10) * 1e6
    return {"memoised_us": hit, "computed_us": cold}


def _memory_figures() -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    for views, specs in WORKLOADS.items():
        layout = compute_layout(tuple(specs))
        requested = sum(v.nbytes for v in layout.views)
        figures.append(
            {"views": views, "requested_bytes": requested, "reserved_bytes": layout.total}
        )
    n = 64 * MB
    for live_view in (False, True):
        gc.collect()
        # Traced from before the first allocation: a peak of old + new cannot hide in a
        # baseline taken after the old buffer exists.
        tracemalloc.start()
        with Arena("cpu", framework="numpy") as arena:
            (old,) = arena.get_simultaneous(((n,), "uint8"))
            if not live_view:
                del old
            arena.get_simultaneous(((2 * n,), "uint8"))
            _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        what = "with a live view of the old buffer" if live_view else "no live view"
        figures.append(
            {"growth": f"64 MiB -> 128 MiB, host, {what}", "peak_over_new_size": peak / (2 * n)}
        )
    return figures


def _breakdown(framework: str, number: int) -> dict[str, float]:
    """Where a locked 3-view request spends its time, component by component (us)."""
    specs = _native_specs(framework, WORKLOADS[3])
    with Arena("cpu", framework="numpy") as arena:
        front = arena.front(framework)
        front.get_simultaneous(*specs)
        # A cached front hands out the prepared view objects themselves.
        prepared = arena.front(framework, cached=True).get_simultaneous(*specs)
        arena.lock()
        adapter = importlib.import_module(f"arena.adapters.{framework}")
        allocate = _allocator(framework, "cpu")

        def dims() -> bool:
            for shape, _ in specs:
                for dim in shape:
                    if dim.__class__ is not int:
                        return False
            return True

        parts: dict[str, Callable[[], Any]] = {
            "whole locked request": lambda: front.get_simultaneous(*specs),
            "slot resolution (current_slot)": arena.current_slot,
            "hash of the request (dict key)": lambda: hash(specs),
            "dimension type check": dims,
            "fresh views (adapter)": lambda: adapter.fresh_views(prepared),
            "framework allocation": lambda: allocate(specs),
        }
        return {name: _time(fn, number, 7)[0] for name, fn in parts.items()}


def _poison_cost(number: int) -> list[dict[str, Any]]:
    """A locked request with and without poisoning (``Arena(poison=True)``), CPU, us."""
    rows: list[dict[str, Any]] = []
    for framework in _frameworks("cpu"):
        if framework == "jax":
            continue  # JAX views are filled behind JAX's back: same memset, no new figure
        for views in (1, 3):
            specs = _native_specs(framework, WORKLOADS[views])
            medians = {}
            for poison in (False, True):
                with Arena("cpu", framework="numpy", poison=poison) as arena:
                    front = arena.front(framework)
                    front.get_simultaneous(*specs)
                    arena.lock()
                    request = functools.partial(front.get_simultaneous, *specs)
                    medians[poison] = _time(request, number, 5)[0]
            nbytes = sum(v.nbytes for v in compute_layout(tuple(WORKLOADS[views])).views)
            rows.append(
                {
                    "framework": framework,
                    "views": views,
                    "bytes": nbytes,
                    "off_us": medians[False],
                    "on_us": medians[True],
                }
            )
    return rows


def _gpu_growth_figure() -> dict[str, Any]:
    import cupy

    n = 256 * MB
    with Arena("cuda:0", framework="cupy") as arena:
        arena.get_simultaneous(((n,), "uint8"))
        cupy.cuda.runtime.deviceSynchronize()
        free_before, _ = cupy.cuda.runtime.memGetInfo()
        arena.get_simultaneous(((2 * n,), "uint8"))
        cupy.cuda.runtime.deviceSynchronize()
        free_after, _ = cupy.cuda.runtime.memGetInfo()
    used = free_before - free_after + n  # bytes held after growth, counting the old N
    return {"growth": "256 MiB -> 512 MiB, cuda:0 direct", "peak_over_new_size": used / (2 * n)}


def _targets(rows: list[Row], checks: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(name: str, value: float, limit: float, below: bool = True) -> None:
        met = value <= limit if below else value >= limit
        targets.append({"target": name, "measured": value, "limit": limit, "met": bool(met)})

    for row in rows:
        if row.views != 3:
            continue
        where = f"{row.framework} ({row.device}), 3 views"
        if row.framework == "torch":
            add(f"{where}: arena / reference", row.ratio("arena", "reference"), 0.35)
            add(f"{where}: arena / torch.empty", row.ratio("arena", "alloc"), 0.6)
        if row.framework == "numpy":
            add(f"{where}: arena / np.empty", row.ratio("arena", "alloc"), 1.0)
        if row.framework == "jax":
            add(
                f"{where}: per-call import / cached (x faster)",
                row.ratio("reference", "cached"),
                20.0,
                below=False,
            )
        else:
            add(f"{where}: cached / reference", row.ratio("cached", "reference"), 0.1)
    zero = checks["zero_allocations"]
    add(
        f"backend allocations after lock over {zero['steps']} steps",
        zero["allocations_after_lock"],
        0,
    )
    memo = checks["layout"]
    add("memoised layout / computed layout", memo["memoised_us"] / memo["computed_us"], 0.25)
    return targets


def _meta(quick: bool) -> dict[str, Any]:
    versions = {}
    for name in ("numpy", "torch", "jax", "cupy", "ml_dtypes"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "?")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "arena": __version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "versions": versions,
        "mode": "quick" if quick else "full",
    }


def run_bench(
    quick: bool = False,
    gpu: bool | None = None,
    progress: Callable[[str], None] | None = None,
    poison: bool = False,
) -> BenchResult:
    """Run the benchmark and return its measurements.

    Parameters
    ----------
    quick : bool
        Few repetitions (a smoke run for CI: numbers are indicative only).
    gpu : bool, optional
        Run the GPU section; default when CuPy sees a device.
    progress : callable, optional
        Called with a line of text before each measurement.
    poison : bool
        Also measure what poisoning (``Arena(poison=True)``) costs a locked request.
    """
    say = progress or (lambda _line: None)
    number, repeat = (200, 5) if quick else (1000, 15)
    devices = ["cpu"]
    if gpu if gpu is not None else cuda_device_count() > 0:
        devices.append("cuda:0")
    result = BenchResult(meta={})
    for device in devices:
        for framework in _frameworks(device):
            for views in WORKLOADS:
                say(f"timing {framework} on {device}, {views} view(s)")
                result.rows.append(_bench_one(framework, device, views, number, repeat))
    say("counting allocations after lock")
    result.checks["zero_allocations"] = _zero_allocations_after_lock(10_000 if quick else 100_000)
    result.checks["layout"] = _layout_memo(number)
    result.checks["breakdown"] = {
        name: _breakdown(name, number * 5)
        for name in ("numpy", "torch")
        if name in _frameworks("cpu")
    }
    if poison:
        say("measuring the cost of poisoning")
        result.checks["poison"] = _poison_cost(max(50, number // 4))
    say("measuring memory")
    result.memory = _memory_figures()
    if "cuda:0" in devices:
        result.memory.append(_gpu_growth_figure())
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        result.meta["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    result.targets = _targets(result.rows, result.checks)
    result.meta = {**_meta(quick), **result.meta}
    return result


def format_result(result: BenchResult) -> str:
    """Tables for people."""
    meta = result.meta
    lines = [
        f"arena {meta['arena']} bench ({meta['mode']}), {meta['date']}, commit {meta['commit']}",
        f"python {meta['python']} on {meta['machine']}"
        + (f", GPU {meta['gpu']}" if "gpu" in meta else "")
        + "; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "us per call, median [p10-p90]; ratios of medians",
        f"{'framework':<16}{'views':>5}{'arena':>17}{'cached':>17}{'alloc':>17}"
        f"{'reference':>17}{'ar/ref':>8}{'ar/alloc':>9}{'ca/ref':>8}",
    ]
    for row in result.rows:
        cells = "".join(
            f"{row.median_us[k]:>7.2f} [{row.spread_us[k][0]:.1f}-{row.spread_us[k][1]:.1f}]".rjust(
                17
            )
            for k in ("arena", "cached", "alloc", "reference")
        )
        lines.append(
            f"{row.framework + ' ' + row.device:<16}{row.views:>5}{cells}"
            f"{row.ratio('arena', 'reference'):>8.2f}{row.ratio('arena', 'alloc'):>9.2f}"
            f"{row.ratio('cached', 'reference'):>8.2f}"
        )
    lines += ["", f"{'target':<58}{'measured':>10}{'limit':>8}  result"]
    for t in result.targets:
        lines.append(
            f"{t['target']:<58}{t['measured']:>10.3g}{t['limit']:>8g}  "
            + ("met" if t["met"] else "NOT MET")
        )
    memo = result.checks["layout"]
    lines += [
        "",
        f"layout: {memo['memoised_us']:.2f} us memoised vs {memo['computed_us']:.2f} us computed",
        "",
        "memory",
    ]
    for framework, parts in result.checks.get("breakdown", {}).items():
        lines.insert(-2, f"where a locked 3-view {framework} request goes (us, medians):")
        for name, us in parts.items():
            lines.insert(-2, f"  {name:<34}{us:>8.3f}")
        lines.insert(-2, "")
    poison = result.checks.get("poison")
    if poison:
        lines.insert(-2, "poisoning (Arena(poison=True)): a locked request, us (medians)")
        for p in poison:
            lines.insert(
                -2,
                f"  {p['framework']:<6} {p['views']} view(s), {p['bytes'] / MB:6.2f} MB filled: "
                f"{p['off_us']:8.2f} off, {p['on_us']:9.2f} on "
                f"({p['bytes'] / (p['on_us'] - p['off_us']) / 1e3:.1f} GB/s)"
                if p["on_us"] > p["off_us"]
                else f"  {p['framework']} {p['views']} view(s): {p['on_us']:.2f} on",
            )
        lines.insert(-2, "")
    for m in result.memory:
        if "views" in m:
            lines.append(
                f"  {m['views']} view(s): requested {m['requested_bytes'] / MB:.3f} MB, "
                f"reserved {m['reserved_bytes'] / MB:.3f} MB "
                f"(+{m['reserved_bytes'] - m['requested_bytes']} B alignment)"
            )
        else:
            lines.append(f"  growth {m['growth']}: peak = {m['peak_over_new_size']:.3f} x new size")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m arena bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="few repetitions (CI smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--gpu",
        dest="gpu",
        action="store_true",
        default=None,
        help="run the GPU section (default: when CuPy sees a device)",
    )
    parser.add_argument("--no-gpu", dest="gpu", action="store_false")
    parser.add_argument(
        "--poison", action="store_true", help="also time poisoned requests (Arena(poison=True))"
    )
    args = parser.parse_args(argv)
    result = run_bench(
        args.quick,
        args.gpu,
        lambda line: print(f"... {line}", file=sys.stderr),
        poison=args.poison,
    )
    print(format_result(result))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
