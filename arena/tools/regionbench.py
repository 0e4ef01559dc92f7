"""The bench's step and scope figures: a replayed step's request and a repeated scope
request against a plain locked request, entering plus exiting a step, and a release,
under each of torch's grad modes (``grad``: none, ``no_grad``, ``inference_mode``) and
in NumPy; and the plain, step and scope requests against the framework's own ``empty``
of the same view (``np.empty``, ``torch.empty``, ``cupy.empty``), written inline as a
user writes it. On a CUDA device (``device="cuda:0"``) the frameworks are CuPy and torch.

Sub-microsecond operations are timed in batches of :data:`BATCH` inside one ``with``
block, and the block's own cost (the same block with no request) is taken off: a round
times the block with the batch, the empty block and the batch as plain requests, back to
back (the order alternating between rounds), and the figure is the median of the
per-round ratios ``(block with batch - empty block) / plain batch`` with its 10th-90th
percentile spread (see :mod:`arena.tools.timing`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import statistics
import time
from collections.abc import Callable
from typing import Any

from arena.core import Arena
from arena.tools.checks import frameworks
from arena.tools.timing import figure_spread, quantile

__all__ = ["BATCH", "format_regions", "format_regions_over_empty", "region_figures"]

#: Requests per timed block (fewer than a front's 256 remembered scope requests).
BATCH = 128


def _modes(framework: str) -> dict[str, Callable[[], Any]]:
    if framework != "torch":
        return {"-": contextlib.nullcontext}
    import torch

    return {
        "grad": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference": torch.inference_mode,
    }


def _spec(framework: str) -> tuple[Any, ...]:
    dtype: Any = "float32"
    if framework == "torch":
        import torch

        dtype = torch.float32
    return ((4, 16), dtype)


def _empty(framework: str, spec: tuple[Any, ...], device: str) -> Callable[[], Any]:
    """A batch of the framework's own allocation of the view, the cheapest spelling:
    ``torch.empty(4, 16, dtype=..., device=...)`` (the sizes as arguments: a tuple of
    them cost torch about 40 % more on the CPU, 6.2 us where 4.0 on an H200),
    ``np.empty((4, 16), dtype)`` and ``cupy.empty`` with a ``numpy.dtype`` (the string
    ``"float32"`` cost NumPy about 50 % more; CuPy the same within 5 % on the H200)."""
    shape, dtype = spec
    rows, columns = shape
    if framework == "torch":
        import torch

        where = torch.device(device)
        empty: Any = torch.empty

        def torch_empties() -> None:
            for _ in range(BATCH):
                empty(rows, columns, dtype=dtype, device=where)

        return torch_empties
    import numpy

    module = importlib.import_module(framework)  # numpy or cupy: the same spelling
    empty = module.empty
    resolved = numpy.dtype(dtype)

    def empties() -> None:
        for _ in range(BATCH):
            empty((rows, columns), resolved)

    return empties


def _figure(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p10": quantile(values, 0.1),
        "p90": quantile(values, 0.9),
    }


def _timed(blocks: dict[str, Callable[[], Any]], rounds: int, reps: int) -> dict[str, list[float]]:
    """Microseconds per call of each block, ``rounds`` times, back to back (the order
    turned round every round), with the collector paused."""
    for block in blocks.values():
        block()
    times: dict[str, list[float]] = {name: [] for name in blocks}
    order = list(blocks.items())
    enabled = gc.isenabled()
    gc.disable()
    try:
        for index in range(rounds):
            for name, block in order if index % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                for _ in range(reps):
                    block()
                times[name].append((time.perf_counter() - start) / reps * 1e6)
    finally:
        if enabled:
            gc.enable()
    return times


def _blocks(
    front: Any, spec: tuple[Any, ...], empty: Callable[[], Any]
) -> dict[str, Callable[[], Any]]:
    """The timed blocks: each with a batch of requests, and each without any."""
    plain = front.get_simultaneous

    def stepped(key: str, release: bool) -> None:
        with front.step(key) as st:
            get, free = st.get_simultaneous, st.release
            for _ in range(BATCH):
                (view,) = get(spec)
                if release:
                    free(view)

    def empty_step() -> None:
        with front.step("empty"):
            pass

    def scoped() -> None:
        with front.scope() as s:
            get = s.get_simultaneous
            for _ in range(BATCH):
                get(spec)

    def empty_scope() -> None:
        with front.scope():
            pass

    def plains() -> None:
        for _ in range(BATCH):
            plain(spec)

    def kept() -> None:
        # Plain requests whose views live to the block's end: what a replay would cost
        # that kept the views it hands out (a quick replay keeps none, NumPy or torch;
        # poisoning and debug mode keep them).
        keep: list[Any] = []
        append = keep.append
        for _ in range(BATCH):
            append(plain(spec))

    def empty_with() -> None:
        with contextlib.nullcontext():
            pass

    return {
        "step": lambda: stepped("batch", False),
        "released": lambda: stepped("released", True),
        "empty_step": empty_step,
        "scope": scoped,
        "empty_scope": empty_scope,
        "plain": plains,
        "kept": kept,
        "with": empty_with,
        "empty": empty,
    }


def _framework_figures(framework: str, device: str, rounds: int, reps: int) -> dict[str, Any]:
    spec = _spec(framework)
    found: dict[str, Any] = {}
    for mode, enter in _modes(framework).items():
        # The whole life in the mode, warm-up included, as an engine runs.
        with Arena(device, framework=framework) as ws, enter():
            blocks = _blocks(ws.front(framework), spec, _empty(framework, spec, device))
            for _ in range(3):  # record, plan, replay (and remember)
                for block in blocks.values():
                    block()
            ws.lock()
            t = _timed(blocks, rounds, reps)
        rows = list(zip(*(t[name] for name in blocks), strict=True))
        per: dict[str, list[float]] = {
            "step": [],
            "step_kept": [],
            "scope": [],
            "enter_exit": [],
            "release": [],
            "plain_empty": [],
            "step_empty": [],
            "scope_empty": [],
        }
        for row in rows:
            (step, released, empty_step_us, scope, empty_scope_us, plain_us, kept_us, with_us,
             empty_us) = row  # fmt: skip
            per["step"].append((step - empty_step_us) / plain_us)
            per["step_kept"].append((step - empty_step_us) / kept_us)
            per["scope"].append((scope - empty_scope_us) / plain_us)
            per["enter_exit"].append(empty_step_us - with_us)
            per["release"].append((released - step) / BATCH)
            per["plain_empty"].append(plain_us / empty_us)
            per["step_empty"].append((step - empty_step_us) / empty_us)
            per["scope_empty"].append((scope - empty_scope_us) / empty_us)
        found[mode] = {
            "step_over_plain": _figure(per["step"]),
            "step_over_kept": _figure(per["step_kept"]),
            "scope_over_plain": _figure(per["scope"]),
            "step_enter_exit_us": _figure(per["enter_exit"]),
            "release_us": _figure(per["release"]),
            "plain_over_empty": _figure(per["plain_empty"]),
            "step_over_empty": _figure(per["step_empty"]),
            "scope_over_empty": _figure(per["scope_empty"]),
            "plain_us": statistics.median(t["plain"]) / BATCH,
            "kept_us": statistics.median(t["kept"]) / BATCH,
            "empty_us": statistics.median(t["empty"]) / BATCH,
            "rounds": rounds,
        }
    return found


def region_figures(quick: bool, device: str = "cpu") -> dict[str, Any]:
    """The figures per framework and grad mode: NumPy and torch (where installed) on the
    host, CuPy and torch (where they see the device) on a CUDA ``device``."""
    rounds, reps = (7, 4) if quick else (31, 20)
    if device == "cpu":
        names = [f for f in ("numpy", "torch") if importlib.util.find_spec(f) is not None]
    else:
        names = [f for f in frameworks(device) if f in ("cupy", "torch")]
    return {framework: _framework_figures(framework, device, rounds, reps) for framework in names}


def format_regions(figures: dict[str, Any], device: str = "cpu") -> list[str]:
    """The figures as table lines."""
    cell = figure_spread  # a column's text: median (p10 to p90)
    lines = [
        "",
        f"steps and scopes on {device} (batches of {BATCH}; median of per-round figures, "
        "p10 to p90)",
        f"{'framework':<10}{'mode':<11}{'step/plain':>26}{'step/kept plain':>26}"
        f"{'scope/plain':>26}{'step enter+exit us':>26}{'release us':>26}{'plain us':>10}"
        f"{'kept us':>9}",
    ]
    for framework, modes in figures.items():
        for mode, f in modes.items():
            lines.append(
                f"{framework:<10}{mode:<11}{cell(f['step_over_plain']):>26}"
                f"{cell(f['step_over_kept']):>26}"
                f"{cell(f['scope_over_plain']):>26}{cell(f['step_enter_exit_us']):>26}"
                f"{cell(f['release_us']):>26}{f['plain_us']:>10.3f}{f['kept_us']:>9.3f}"
            )
    lines.append(
        "step/plain: the target's ratio, against plain requests whose views are dropped at "
        "once; step/kept plain: against plain requests whose views are kept to the block's "
        "end, as a replay would that kept its own (a quick replay keeps none)"
    )
    return lines


def format_regions_over_empty(figures: dict[str, Any], device: str = "cpu") -> list[str]:
    """The plain, step and scope requests against the framework's own ``empty``, as
    table lines (none where there are no figures)."""
    if not figures:
        return []
    cell = figure_spread
    lines = [
        "",
        f"locked requests on {device} against the framework's empty (batches of {BATCH}; "
        "median of per-round ratios, p10 to p90)",
        f"{'framework':<10}{'mode':<11}{'plain/empty':>26}{'step/empty':>26}"
        f"{'scope/empty':>26}{'plain us':>10}{'empty us':>10}",
    ]
    for framework, modes in figures.items():
        for mode, f in modes.items():
            lines.append(
                f"{framework:<10}{mode:<11}{cell(f['plain_over_empty']):>26}"
                f"{cell(f['step_over_empty']):>26}{cell(f['scope_over_empty']):>26}"
                f"{f['plain_us']:>10.3f}{f['empty_us']:>10.3f}"
            )
    return lines
