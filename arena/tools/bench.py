"""``python -m arena bench``: realistic workloads against the allocation they replace.

For every installed framework it times the workloads of :mod:`arena.tools.workloads` with
four methods, each written as straight-line code the way a user writes it:

* ``arena``: a locked, presized ``front.get_simultaneous`` (fresh view objects);
* ``cached``: the same through a cached front (the very same objects on a repeat);
* ``alloc``: the framework's own allocation, one direct call per view (``torch.empty``);
* ``reference``: what vLLM's WorkspaceManager does per call (for JAX: a DLPack import
  per view; ``jnp.empty`` compiles per shape).

Also (:mod:`arena.tools.checks`): an unlocked and a second slot's hit, the first request
of a never-seen structure, zero allocations after lock, the layout memo, the cache
memory, the growth peak; and (:mod:`arena.tools.regionbench`) a replayed step's and a
repeated scope's request against a plain one, a step's enter and exit and a release, per
grad mode; and (:mod:`arena.tools.passbench`) whole decoder passes with their arithmetic in a
step and in scopes against the same pass on the framework's allocation and on tensors
allocated once. Every ratio is the median of paired rounds with its 10th-90th
percentile spread (:mod:`arena.tools.timing`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arena._version import __version__, active_hit_path
from arena.base.events import MB
from arena.errors import DeviceUnavailableError
from arena.memory.devices import cuda_device_count, cuda_unavailable_reason
from arena.tools import checks
from arena.tools.membench import fixed_address_figures, format_fixed_address
from arena.tools.passbench import (
    PASS_TARGETS,
    format_cached_front,
    format_inference_front,
    format_passes,
    pass_figures,
)
from arena.tools.planbench import format_planning, run_planning_bench
from arena.tools.regionbench import format_regions, format_regions_over_empty, region_figures
from arena.tools.timing import Paired, spread
from arena.tools.workloads import WORKLOADS, WorkloadRow, time_workload

__all__ = [
    "REGION_TARGETS",
    "TARGETS",
    "BenchResult",
    "format_result",
    "format_targets",
    "load_average",
    "main",
    "run_bench",
]

METHODS = ("arena", "cached", "alloc", "reference")


@dataclass
class BenchResult:
    """Everything one run measured."""

    meta: dict[str, Any]
    rows: list[WorkloadRow] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    #: The planning bench (:mod:`arena.tools.planbench`): bytes per mode and step replays.
    planning: dict[str, Any] = field(default_factory=dict)


def _row(rows: list[WorkloadRow], workload: str, framework: str) -> WorkloadRow | None:
    for r in rows:
        if r.workload == workload and r.framework == framework and r.device == "cpu":
            return r
    return None


#: (workload, framework, baseline, limit): ``arena`` against a baseline, paired per round.
TARGETS = (
    ("fixed", "torch", "alloc", 0.30),
    ("varying <32 MiB", "torch", "alloc", 0.5),
    ("<4 MiB, 2048 layouts", "torch", "alloc", 0.5),
    ("varying <32 MiB", "torch", "reference", 0.3),
    ("fixed", "numpy", "alloc", 1.0),
    ("varying <32 MiB", "numpy", "alloc", 1.0),
    ("<4 MiB, 16 layouts", "numpy", "alloc", 0.8),
    ("<4 MiB, 512 layouts", "numpy", "alloc", 0.8),
    ("<4 MiB, 2048 layouts", "numpy", "alloc", 0.8),
)

#: (figure of :mod:`arena.tools.regionbench`, what it is, limit): issue 32's step and scope
#: targets, per framework and grad mode, each timed in batches.
REGION_TARGETS = (
    ("step_over_plain", "request in a replayed step / plain locked request", 1.05),
    ("scope_over_plain", "repeated scope request / plain locked request", 1.05),
    ("step_enter_exit_us", "step enter + exit, us", 2.0),
    ("release_us", "release in a replayed step, us", 0.3),
)


def _targets(
    rows: list[WorkloadRow], found: dict[str, Any], planning: dict[str, Any]
) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(
        name: str,
        value: float,
        limit: float,
        spread: tuple[float, float] | None,
        note: str | None = None,
    ) -> None:
        low, high = spread if spread is not None else (None, None)
        target = {
            "target": name,
            "measured": value,
            "p10": low,
            "p90": high,
            "limit": limit,
            "met": value <= limit,
        }
        if note is not None:  # a figure printed beside the target's, not checked
            target["note"] = note
        targets.append(target)

    def paired(name: str, figure: Paired | dict[str, Any], limit: float) -> None:
        record = figure.record() if isinstance(figure, Paired) else figure
        add(name, record["ratio"], limit, (record["p10"], record["p90"]))

    for workload, framework, bottom, limit in TARGETS:
        row = _row(rows, workload, framework)
        if row is not None:
            name = f"{framework} {workload}: arena / {bottom}"
            add(name, row.ratio("arena", bottom), limit, row.spread("arena", bottom))
    for framework, figure in found["slots"].items():
        paired(f"{framework}: 2-slot hit / 1-slot hit", figure, 1.05)
    for framework, figure in found["warm_up"].items():
        paired(f"{framework}: unlocked hit / locked hit", figure, 1.5)
    # Issue 32 item 4: a never-seen structure's first request, presized or grown.
    for views, limit in ((3, 30.0), (2000, 15.0)):
        for case, key in (("presized", f"new_{views}"), ("grown", f"new_{views}_grown")):
            if key in found:
                name = f"never-seen {views}-view request, {case} / np.empty per view"
                paired(name, found[key], limit)
    paired("10^4 layouts in rotation / the fixed request (arena)", found["rotation"], 2.0)
    for framework, modes in found.get("regions", {}).items():
        for mode, figures in modes.items():
            where = framework if mode == "-" else f"{framework} {mode}"
            for key, what, limit in REGION_TARGETS:
                f = figures[key]
                add(f"{where}: {what}", f["median"], limit, (f["p10"], f["p90"]))
    for framework, modes in found.get("passes", {}).items():
        for mode, figures in modes.items():
            where = framework if mode == "-" else f"{framework} {mode}"
            for top, bottom, limit in PASS_TARGETS:
                f = figures[f"{top}_over_{bottom}"]
                name = f"{where}: decoder pass with {top} / on tensors allocated once"
                add(name, f["median"], limit, (f["p10"], f["p90"]))
                front = figures.get(f"inference_front_{top}_over_{bottom}")
                if front is not None:  # the same pass on ws.front("torch", inference=True)
                    name = f"{framework} inference front: decoder pass with {top} / on "
                    name += "tensors allocated once"
                    add(name, front["median"], limit, (front["p10"], front["p90"]))
                cached = figures.get(f"cached_front_{top}_over_{bottom}")
                if cached is not None:  # the same pass on ws.front(framework, cached=True)
                    name = f"{where} cached front: decoder pass with {top} / on tensors "
                    name += "allocated once"
                    add(name, cached["median"], limit, (cached["p10"], cached["p90"]))
    zero = found["zero_allocations"]
    add(
        f"allocations after lock over {zero['steps']} varying steps",
        zero["allocations_after_lock"],
        0,
        None,
    )
    paired("memoised layout / computed layout", found["layout"], 0.25)
    if planning:
        for row in planning["bytes"]:
            add(f"steps / LOAD, {row['tokens']} tokens", row["steps"] / row["load"], 1.05, None)
    return targets


def _meta(quick: bool, load_at_start: str) -> dict[str, Any]:
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
        "load average at start": load_at_start,
        "load average at end": load_average(),
        "arena": __version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "hit path": active_hit_path(),
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

    Raises
    ------
    DeviceUnavailableError
        When ``gpu`` is true and no CUDA device is usable (before anything is timed).
    """
    if gpu and cuda_device_count() == 0:
        raise DeviceUnavailableError(
            f"gpu=True (--gpu) but no CUDA device is usable here ({cuda_unavailable_reason()});"
            " run on a machine with a GPU, or leave it out: the bench runs the GPU part"
            " wherever a device is usable"
        )
    say = progress or (lambda _line: None)
    steps, repeat, number = (500, 5, 2000) if quick else (2000, 31, 20_000)
    rounds = 11 if quick else 41
    devices = ["cpu"]
    if gpu if gpu is not None else cuda_device_count() > 0:
        devices.append("cuda:0")
    result = BenchResult(meta={})
    found = result.checks
    load_at_start = load_average()
    if not quick:
        # First, while the process is fresh: resident memory only grows by new pages.
        say("measuring the view cache's memory")
        found["cache_memory"] = checks.cache_memory()
    for device in devices:
        for framework in checks.frameworks(device):
            for workload in WORKLOADS:
                runs = steps
                if framework == "jax":
                    # A JAX step costs 10-100x a torch step: fewer steps, and in a quick
                    # run only the fixed and varying workloads.
                    if quick and workload.name not in ("fixed", "varying"):
                        continue
                    runs = 100
                say(f"timing {framework} on {device}: {workload.name}")
                result.rows.append(
                    time_workload(workload, framework, device, steps=runs, repeat=repeat)
                )
    say("timing never-seen requests, a second slot and the unlocked warm-up path")
    for views, trials in ((3, 21 if quick else 101), (2000, 2 if quick else 5)):
        for grown, key in ((False, f"new_{views}"), (True, f"new_{views}_grown")):
            found[key] = checks.never_seen(views, trials, grown=grown).record()
    found["slots"] = {k: v.record() for k, v in checks.slots_cost(rounds, number // 10).items()}
    found["warm_up"] = {k: v.record() for k, v in checks.warm_up_cost(rounds, number // 10).items()}
    found["rotation"] = checks.rotation_cost(rounds // 2, 10_000 if not quick else 2_000).record()
    say("counting allocations after lock")
    found["zero_allocations"] = checks.zero_allocations_after_lock(10_000 if quick else 100_000)
    found["layout"] = checks.layout_memo(rounds, number // 10).record()
    if poison:
        say("measuring the cost of poisoning")
        found["poison"] = checks.poison_cost(rounds, max(50, number // 40))
    say("measuring memory")
    result.memory = checks.memory_figures()
    say("fixed-address memory: growth against the default source, sleep and wake")
    found["fixed_address"] = fixed_address_figures(quick)
    found.update(_regions(quick, devices, say))
    say("whole passes: four decoder layers with their arithmetic, steps and scopes")
    found["passes"] = pass_figures(quick)
    say("planning: four decoder layers as plain requests, scopes and steps")
    result.planning = run_planning_bench(quick)
    if "cuda:0" in devices:
        growth = checks.gpu_growth_figure()
        if growth is not None:
            result.memory.append(growth)
        result.meta["gpu"] = _gpu_name()
    result.targets = _targets(result.rows, found, result.planning)
    result.meta = {**_meta(quick, load_at_start), **result.meta}
    return result


def load_average() -> str:
    """The machine's 1-, 5- and 15-minute load averages (other work on its cores), as
    ``"1.23 1.10 0.98"``; ``"?"`` where the platform has none."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"


def _regions(quick: bool, devices: list[str], say: Callable[[str], None]) -> dict[str, Any]:
    """The step and scope figures on the host (``regions``) and, where the bench runs on
    a CUDA device, there too (``regions_gpu``: CuPy and torch against their own empty)."""
    say("steps and scopes: requests, enter and exit, release, per grad mode")
    found = {"regions": region_figures(quick)}
    if "cuda:0" in devices:
        say("steps and scopes on cuda:0, against torch.empty and cupy.empty")
        found["regions_gpu"] = region_figures(quick, device="cuda:0")
    return found


def _gpu_name() -> str:
    try:
        import torch

        return str(torch.cuda.get_device_name(0))
    except (ImportError, RuntimeError, AssertionError):
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)


def _spread(value: float, low: float | None, high: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"{value:.3g}"
    return spread(value, low, high)


def format_targets(targets: list[dict[str, Any]]) -> list[str]:
    """The targets table: one line per target, its columns aligned whatever the names' length
    (at least 66 characters wide; the longest names, the decoder passes on a cached front
    under ``inference_mode``, pass 80 characters)."""
    width = max([66, *[len(t["target"]) + 2 for t in targets]])
    lines = [f"{'target':<{width}}{'measured (p10 to p90)':>28}{'limit':>7}  result"]
    for t in targets:
        lines.append(
            f"{t['target']:<{width}}{_spread(t['measured'], t['p10'], t['p90']):>28}"
            f"{t['limit']:>7g}  "
            + ("met" if t["met"] else "NOT MET")
            + (f" ({t['note']})" if t.get("note") else "")
        )
    return lines


def format_result(result: BenchResult) -> str:
    """Tables for people."""
    meta = result.meta
    lines = [
        f"arena {meta['arena']} bench ({meta['mode']}), {meta['date']}, commit {meta['commit']}, "
        f"hit path {meta['hit path']}, load average {meta.get('load average at start', '?')} "
        f"at the start, {meta.get('load average at end', '?')} at the end",
        f"python {meta['python']} on {meta['machine']}"
        + (f", GPU {meta['gpu']}" if "gpu" in meta else "")
        + "; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "us per step (median over rounds); arena / baseline: median of per-round ratios "
        "(p10 to p90); '-' not measured",
        f"{'workload':<22}{'framework':<11}"
        + "".join(f"{m:>10}" for m in METHODS)
        + f"{'arena/alloc':>26}{'arena/ref':>26}",
    ]
    for row in result.rows:
        cells = "".join(
            f"{row.median_us[m]:>10.2f}" if m in row.median_us else f"{'-':>10}" for m in METHODS
        )
        ratios = "".join(
            f"{_spread(row.ratio('arena', b), *row.spread('arena', b)):>26}"
            for b in ("alloc", "reference")
        )
        where = row.framework + ("" if row.device == "cpu" else f" {row.device}")
        lines.append(f"{row.workload:<22}{where:<11}{cells}{ratios}")
    lines += ["", *format_targets(result.targets)]
    found = result.checks
    memo = found["layout"]
    lines += [
        "",
        f"layout: {memo['us']:.2f} us memoised vs {memo['baseline_us']:.2f} us computed "
        f"({_spread(memo['ratio'], memo['p10'], memo['p90'])}x, {memo['rounds']} paired rounds)",
    ]
    for framework, w in found["warm_up"].items():
        lines.append(
            f"{framework} 3-view hit: {w['baseline_us']:.2f} us locked, {w['us']:.2f} us "
            "unlocked (call sites recorded)"
        )
    for views in (3, 2000):
        for case, key in (("presized", f"new_{views}"), ("grown", f"new_{views}_grown")):
            n = found.get(key)
            if n is not None:
                lines.append(
                    f"never-seen {views}-view request, {case}: {n['us']:.1f} us, np.empty per "
                    f"view {n['baseline_us']:.2f} us"
                )
    for figure in found.get("cache_memory", []):
        lines.append(
            f"{figure['framework']} view cache: {figure['bytes_per_layout'] / 1024:.2f} KiB "
            "resident per remembered 3-view request"
        )
    for p in found.get("poison", []):
        lines.append(
            f"poison, {p['framework']} ({p['bytes'] / MB:.2f} MB filled): {p['us']:.2f} us on, "
            f"{p['baseline_us']:.2f} us off ({_spread(p['ratio'], p['p10'], p['p90'])}x)"
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
    lines += format_regions(found.get("regions", {}))
    lines += format_regions_over_empty(found.get("regions", {}))
    if found.get("regions_gpu"):
        lines += format_regions(found["regions_gpu"], "cuda:0")
        lines += format_regions_over_empty(found["regions_gpu"], "cuda:0")
    lines += format_passes(found.get("passes", {}))
    lines += format_cached_front(found.get("passes", {}))
    lines += format_inference_front(found.get("passes", {}))
    lines += format_fixed_address(found.get("fixed_address", {}))
    if result.planning:
        lines += ["", format_planning(result.planning)]
    return "\n".join(lines)


def _fail(message: str) -> None:
    """One line on stderr that names the command, as ``python -m arena plan``'s do."""
    print(f"python -m arena bench: {message}", file=sys.stderr)


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

        try:
            figures = json.loads(Path(args.render).read_text())
            tables = render_markdown(figures)
        except OSError as exc:
            _fail(f"--render {args.render!r}: cannot read it ({exc.strerror})")
            return 2
        except (ValueError, LookupError, TypeError, AttributeError) as exc:  # not the bench's
            _fail(
                f"--render {args.render!r}: not a file that `python -m arena bench --json "
                f"PATH` wrote ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            )
            return 2
        print(tables, end="")
        return 0
    problem = None if args.json is None else _json_problem(args.json)
    if problem is not None:  # before the run: the figures of minutes of timing need a home
        _fail(f"--json {args.json!r}: {problem}")
        return 2
    result = run_bench(
        args.quick,
        args.gpu,
        lambda line: print(f"... {line}", file=sys.stderr),
        poison=args.poison,
    )
    print(format_result(result))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(asdict(result), indent=2, default=str))
        except OSError as exc:  # e.g. the folder went away during the run
            _fail(
                f"--json {args.json!r}: cannot write it ({exc.strerror or exc}); "
                "the tables above are the run's figures"
            )
            return 1
    return 0


def _json_problem(path: str) -> str | None:
    """Why ``--json path`` cannot be written (no such folder, a directory), or None."""
    if not path:  # Path("") is the current folder: say what was given
        return "an empty path; name a file (e.g. bench.json)"
    target = Path(path)
    if target.is_dir():
        return "is a directory; name a file in it (e.g. bench.json)"
    if not target.parent.is_dir():
        return f"the folder {str(target.parent)!r} does not exist; create it first or pick another"
    return None


if __name__ == "__main__":
    sys.exit(main())
