"""``python -m arena bench``: realistic workloads against the allocation they replace.

For every installed framework it times the workloads of :mod:`arena.tools.workloads` with
four methods, each written as straight-line code the way a user writes it:

* ``arena``: a locked, presized ``front.get_simultaneous`` (fresh view objects);
* ``cached``: the same through a cached front (the very same objects on a repeat);
* ``alloc``: the framework's own allocation, one direct call per view (``torch.empty``);
* ``reference``: what vLLM's WorkspaceManager does per call (for JAX: a DLPack import
  per view; ``jnp.empty`` compiles per shape).

Also: zero allocations after lock, the warm-up cost, the cache memory, the growth peak."""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import platform
import random
import statistics
import subprocess
import sys
import time
import timeit
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arena._version import __version__
from arena.core import Arena
from arena.memory.devices import cuda_device_count
from arena.observe.events import MB
from arena.tools.workloads import ATTENTION, WORKLOADS, WorkloadRow, time_workload
from arena.views.layout import clear_layout_memo, compute_layout

__all__ = ["BenchResult", "format_result", "main", "run_bench"]

METHODS = ("arena", "cached", "alloc", "reference")


@dataclass
class BenchResult:
    """Everything one run measured."""

    meta: dict[str, Any]
    rows: list[WorkloadRow] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)


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


def _time(fn: Callable[[], Any], number: int, repeat: int) -> float:
    fn()
    return statistics.median(t / number * 1e6 for t in timeit.Timer(fn).repeat(repeat, number))


def _attention(tokens: int) -> tuple[Any, ...]:
    return tuple((((tokens if m else 1), *rest), dtype) for m, rest, dtype in ATTENTION)


def _zero_allocations_after_lock(steps: int) -> dict[str, Any]:
    with Arena("cpu", ubatches=2, framework="numpy") as arena:
        arena.reserve(*_attention(8192))
        arena.lock()
        before = arena.stats().allocations
        rng = random.Random(0)
        for step in range(steps):
            with arena.ubatch(step % 2):
                arena.get_simultaneous(*_attention(rng.randint(1, 8192)))
        stats = arena.stats()
    return {"steps": steps, "allocations_after_lock": stats.allocations - before}


def _warm_up_cost(number: int) -> dict[str, float]:
    """A hit while unlocked (call sites recorded) against the same hit locked, us."""
    figures: dict[str, float] = {}
    for framework in ("numpy", "torch"):
        if framework not in _frameworks("cpu"):
            continue
        specs = _native(framework, _attention(256))
        with Arena("cpu", framework="numpy") as arena:
            front = arena.front(framework)
            front.get_simultaneous(*specs)
            front.get_simultaneous(*specs)
            unlocked = _time(lambda: front.get_simultaneous(*specs), number, 7)  # noqa: B023
            arena.lock()
            locked = _time(lambda: front.get_simultaneous(*specs), number, 7)  # noqa: B023
        figures[f"{framework}_unlocked_us"] = unlocked
        figures[f"{framework}_locked_us"] = locked
    return figures


def _native(framework: str, specs: tuple[Any, ...]) -> tuple[Any, ...]:
    if framework == "torch":
        import torch

        return tuple((shape, getattr(torch, dtype)) for shape, dtype in specs)
    return specs


def _layout_memo(number: int) -> dict[str, float]:
    specs = tuple((shape, dtype) for shape, dtype in _attention(256))
    compute_layout(specs)
    hit = _time(lambda: compute_layout(specs), number, 5)

    def miss() -> None:
        clear_layout_memo()
        compute_layout(specs)

    cold = _time(miss, max(1, number // 10), 5)
    return {"memoised_us": hit, "computed_us": cold}


def _cache_memory() -> list[dict[str, Any]]:
    """Resident bytes per remembered 3-view request (the cost of a large view cache)."""
    figures = []
    for framework in ("numpy", "torch"):
        if framework not in _frameworks("cpu"):
            continue
        with Arena("cpu", framework="numpy") as arena:
            front = arena.front(framework)
            arena.reserve(*_attention(4096))
            gc.collect()
            before = _resident()
            for _ in range(2):  # a layout is remembered from its second sighting
                for tokens in range(1, 4097):
                    front.get_simultaneous(*_native(framework, _attention(tokens)))
            gc.collect()
            entries = arena.stats().cached_layouts
            figures.append(
                {"framework": framework, "bytes_per_layout": (_resident() - before) / entries}
            )
    return figures


def _resident() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    except OSError:  # not Linux
        return 0


def _memory_figures() -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    for workload in WORKLOADS:
        if workload.name not in ("fixed", "MoE 5 views", "32 views"):
            continue
        shapes = workload.shapes(256)
        layout = compute_layout(
            tuple(
                (shape, dtype) for shape, (_, _, dtype) in zip(shapes, workload.views, strict=True)
            )
        )
        requested = sum(v.nbytes for v in layout.views)
        figures.append(
            {
                "workload": workload.name,
                "requested_bytes": requested,
                "reserved_bytes": layout.total,
            }
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


def _poison_cost(number: int) -> list[dict[str, Any]]:
    """A locked request with and without poisoning (``Arena(poison=True)``), CPU, us."""
    rows: list[dict[str, Any]] = []
    for framework in ("numpy", "torch"):
        if framework not in _frameworks("cpu"):
            continue
        specs = _native(framework, _attention(256))
        medians = {}
        for poison in (False, True):
            with Arena("cpu", framework="numpy", poison=poison) as arena:
                front = arena.front(framework)
                front.get_simultaneous(*specs)
                arena.lock()
                medians[poison] = _time(lambda: front.get_simultaneous(*specs), number, 5)  # noqa: B023
        nbytes = sum(v.nbytes for v in compute_layout(_attention(256)).views)
        rows.append(
            {
                "framework": framework,
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


def _row(rows: list[WorkloadRow], workload: str, framework: str) -> WorkloadRow | None:
    return next(
        (
            r
            for r in rows
            if r.workload == workload and r.framework == framework and r.device == "cpu"
        ),
        None,
    )


#: (workload, framework, numerator, denominator, limit, what the issue aims for).
TARGETS = (
    ("varying", "torch", "arena", "reference", 0.5, 0.35),
    ("varying", "torch", "arena", "alloc", 0.9, 0.6),
    ("fixed", "torch", "arena", "alloc", 0.4, None),
    ("fixed", "numpy", "arena", "alloc", 1.0, None),
    ("varying", "numpy", "arena", "alloc", 1.2, None),
)


def _targets(rows: list[WorkloadRow], checks: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(name: str, value: float, limit: float, aim: float | None = None) -> None:
        targets.append(
            {"target": name, "measured": value, "limit": limit, "aim": aim, "met": value <= limit}
        )

    for workload, framework, top, bottom, limit, aim in TARGETS:
        row = _row(rows, workload, framework)
        if row is not None:
            add(f"{framework} {workload}: {top} / {bottom}", row.ratio(top, bottom), limit, aim)
    fixed, rotation = _row(rows, "fixed", "torch"), _row(rows, "10^4 layouts", "torch")
    if fixed is not None and rotation is not None:
        add(
            "torch 10^4 layouts / fixed (arena)",
            rotation.median_us["arena"] / fixed.median_us["arena"],
            2.0,
        )
    warm = checks["warm_up"]
    for framework in ("numpy", "torch"):
        if f"{framework}_locked_us" in warm:
            add(
                f"{framework}: unlocked hit / locked hit",
                warm[f"{framework}_unlocked_us"] / warm[f"{framework}_locked_us"],
                2.0,
            )
    zero = checks["zero_allocations"]
    add(
        f"allocations after lock over {zero['steps']} varying steps",
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
        Short sequences and few repetitions (a smoke run for CI: indicative only).
    gpu : bool, optional
        Run the GPU section; default when a CUDA device is usable.
    progress : callable, optional
        Called with a line of text before each measurement.
    poison : bool
        Also measure what poisoning (``Arena(poison=True)``) costs a locked request.
    """
    say = progress or (lambda _line: None)
    steps, repeat, number = (1000, 3, 2000) if quick else (10_000, 7, 20_000)
    devices = ["cpu"]
    if gpu if gpu is not None else cuda_device_count() > 0:
        devices.append("cuda:0")
    result = BenchResult(meta={})
    if not quick:
        # First, while the process is fresh: resident memory only grows by new pages.
        say("measuring the view cache's memory")
        result.checks["cache_memory"] = _cache_memory()
    for device in devices:
        for framework in _frameworks(device):
            for workload in WORKLOADS:
                runs = steps
                if framework == "jax":
                    # A JAX step costs 10-100x a torch step: fewer steps, and in a quick
                    # run only the fixed and varying workloads.
                    if quick and workload.name not in ("fixed", "varying"):
                        continue
                    runs = 200
                say(f"timing {framework} on {device}: {workload.name}")
                result.rows.append(
                    time_workload(workload, framework, device, steps=runs, repeat=repeat)
                )
    say("counting allocations after lock")
    result.checks["zero_allocations"] = _zero_allocations_after_lock(10_000 if quick else 100_000)
    result.checks["layout"] = _layout_memo(number)
    say("timing the unlocked warm-up path")
    result.checks["warm_up"] = _warm_up_cost(number)
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
        "us per step, median of interleaved repetitions; ratios of medians; '-' not measured",
        f"{'workload':<15}{'framework':<12}"
        + "".join(f"{m:>10}" for m in METHODS)
        + f"{'ar/alloc':>10}{'ar/ref':>8}",
    ]
    for row in result.rows:
        cells = "".join(
            f"{row.median_us[m]:>10.2f}" if m in row.median_us else f"{'-':>10}" for m in METHODS
        )
        ratios = "".join(
            f"{r:>{w}.2f}" if not math.isnan(r) else f"{'-':>{w}}"
            for r, w in ((row.ratio("arena", "alloc"), 10), (row.ratio("arena", "reference"), 8))
        )
        where = row.framework + ("" if row.device == "cpu" else f" {row.device}")
        lines.append(f"{row.workload:<15}{where:<12}{cells}{ratios}")
    lines += ["", f"{'target':<58}{'measured':>10}{'limit':>8}{'aim':>6}  result"]
    for t in result.targets:
        aim = f"{t['aim']:>6g}" if t["aim"] is not None else f"{'':>6}"
        lines.append(
            f"{t['target']:<58}{t['measured']:>10.3g}{t['limit']:>8g}{aim}  "
            + ("met" if t["met"] else "NOT MET")
        )
    memo, warm = result.checks["layout"], result.checks["warm_up"]
    lines += [
        "",
        f"layout: {memo['memoised_us']:.2f} us memoised vs {memo['computed_us']:.2f} us computed",
    ]
    for framework in ("numpy", "torch"):
        if f"{framework}_locked_us" in warm:
            lines.append(
                f"{framework} 3-view hit: {warm[f'{framework}_locked_us']:.2f} us locked, "
                f"{warm[f'{framework}_unlocked_us']:.2f} us unlocked (call sites recorded)"
            )
    for figure in result.checks.get("cache_memory", []):
        lines.append(
            f"{figure['framework']} view cache: {figure['bytes_per_layout'] / 1024:.2f} KiB "
            "resident per remembered 3-view request"
        )
    for p in result.checks.get("poison", []):
        lines.append(
            f"poison, {p['framework']} ({p['bytes'] / MB:.2f} MB filled): "
            f"{p['off_us']:.2f} us off, {p['on_us']:.2f} us on"
        )
    lines += ["", "memory"]
    for m in result.memory:
        if "workload" in m:
            lines.append(
                f"  {m['workload']} at 256 tokens: requested {m['requested_bytes'] / MB:.3f} MB, "
                f"reserved {m['reserved_bytes'] / MB:.3f} MB "
                f"(+{m['reserved_bytes'] - m['requested_bytes']} B alignment)"
            )
        else:
            lines.append(f"  growth {m['growth']}: peak = {m['peak_over_new_size']:.3f} x new size")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m arena bench",
        description="Time realistic workloads on a locked arena against the framework "
        "allocation they replace and a vLLM-style reference, and check the targets.",
    )
    add = parser.add_argument
    add("--quick", action="store_true", help="short runs, a CI smoke run (default: full runs)")
    add("--json", metavar="PATH", help="also write the results as JSON (default: no JSON)")
    gpu = "(default: run it when a CUDA device is usable)"
    add("--gpu", dest="gpu", action="store_true", default=None, help=f"run the GPU part {gpu}")
    add("--no-gpu", dest="gpu", action="store_false", help=f"skip the GPU part {gpu}")
    add("--poison", action="store_true", help="also time Arena(poison=True) (default: off)")
    add(
        "--render",
        metavar="PATH",
        help="only print the Markdown tables of a --json file (default: run the bench)",
    )
    args = parser.parse_args(argv)
    if args.render:
        from arena.tools.benchtable import render_markdown

        print(render_markdown(json.loads(Path(args.render).read_text())), end="")
        return 0
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
