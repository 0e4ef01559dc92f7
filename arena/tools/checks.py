"""What ``python -m arena bench`` measures besides the workloads: the costs that are not a
step of an engine (an unlocked or a second slot's hit, a never-seen request), zero
allocations after lock, the layout memo, the memory of the view cache, growth peaks and
poisoning.

Every comparison of two costs is paired (:mod:`arena.tools.timing`): the two run back to
back, round after round, and the figure is the median of the per-round ratios with its
10th-90th percentile spread.
"""

from __future__ import annotations

import gc
import importlib.util
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from arena.base.events import MB
from arena.base.layout import clear_layout_memo, compute_layout
from arena.core import Arena
from arena.memory.devices import cuda_device_count
from arena.tools.timing import Paired, paired, quantile
from arena.tools.workloads import ATTENTION, WORKLOADS, specs_at, step_function

__all__ = [
    "attention",
    "cache_memory",
    "frameworks",
    "gpu_growth_figure",
    "layout_memo",
    "memory_figures",
    "never_seen",
    "poison_cost",
    "rotation_cost",
    "slots_cost",
    "warm_up_cost",
    "zero_allocations_after_lock",
]

(_FIXED,) = [w for w in WORKLOADS if w.name == "fixed"]


def frameworks(device: str) -> list[str]:
    """The frameworks the bench times on ``device``: installed, and usable there."""
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


def _host() -> list[str]:
    return [name for name in ("numpy", "torch") if name in frameworks("cpu")]


def attention(tokens: int) -> tuple[Any, ...]:
    """The attention workload's request at ``tokens`` tokens, with dtype names."""
    return tuple((((tokens if m else 1), *rest), dtype) for m, rest, dtype in ATTENTION)


def _hit(front: Any, framework: str) -> Callable[[Any], Any]:
    """A repeated request (the fixed attention step), called from user code."""
    specs = specs_at(framework, _FIXED)(256)
    hit = step_function(["return get(*specs)"], {"get": front.get_simultaneous, "specs": specs})
    hit(0)
    hit(0)  # remembered now
    return hit


def zero_allocations_after_lock(steps: int) -> dict[str, Any]:
    """Backend allocations over ``steps`` varying requests on a locked 2-slot arena."""
    with Arena("cpu", ubatches=2, framework="numpy") as arena:
        arena.reserve(*attention(8192))
        arena.lock()
        before = arena.stats().allocations
        rng = random.Random(0)
        for step in range(steps):
            with arena.ubatch(step % 2):
                arena.get_simultaneous(*attention(rng.randint(1, 8192)))
        stats = arena.stats()
    return {"steps": steps, "allocations_after_lock": stats.allocations - before}


def warm_up_cost(rounds: int, number: int) -> dict[str, Paired]:
    """A hit while unlocked (call sites recorded) against the same hit locked, paired."""
    figures: dict[str, Paired] = {}
    for framework in _host():
        with Arena("cpu", framework="numpy") as unlocked, Arena("cpu", framework="numpy") as locked:
            loose = _hit(unlocked.front(framework), framework)
            tight = _hit(locked.front(framework), framework)
            locked.lock()
            figures[framework] = paired(loose, tight, range(number), rounds)
    return figures


def slots_cost(rounds: int, number: int) -> dict[str, Paired]:
    """A locked hit on an arena of two micro-batch slots against one of a single slot."""
    figures: dict[str, Paired] = {}
    for framework in _host():
        with (
            Arena("cpu", framework="numpy", ubatches=2) as two,
            Arena("cpu", framework="numpy") as one,
        ):
            hits = [_hit(arena.front(framework), framework) for arena in (two, one)]
            two.lock()
            one.lock()
            figures[framework] = paired(hits[0], hits[1], range(number), rounds)
    return figures


def rotation_cost(rounds: int, steps: int) -> Paired:
    """torch: a locked request on the 10^4-layouts rotation (1, 2, ..., 10 000 tokens)
    against the fixed request, paired (numpy where torch is missing)."""
    framework = "torch" if "torch" in _host() else "numpy"
    specs = specs_at(framework, _FIXED)
    rotation = [specs(1 + step % 10_000) for step in range(steps)]
    with Arena("cpu", framework="numpy") as arena:
        arena.reserve(*specs(10_000))
        get = arena.front(framework).get_simultaneous
        namespace = {"get": get, "fixed": specs(256)}
        fixed = step_function(["return get(*fixed)"], namespace)
        varied = step_function(["return get(*T)"], namespace)
        for request in rotation:  # two sightings each: every layout remembered
            varied(request)
            varied(request)
        arena.lock()
        figure = paired(varied, lambda _: fixed(0), rotation, rounds)
    return figure


#: Calls that warm a new baseline function before it is timed (:func:`never_seen`).
_WARM_CALLS = 20
#: Seconds of one timed batch of the baseline in :func:`never_seen`.
_BATCH_S = 20e-6


def never_seen(views: int, trials: int, number: int = 200, *, grown: bool = False) -> Paired:
    """The first request of a structure a NumPy arena never saw, against one ``np.empty``
    per view of the same request (its steady-state cost), per trial.

    Each trial makes a new arena and a structure no arena saw in this process (its
    dimension counts and dtypes drawn anew), so no cache of structures, layouts or views
    helps. The dtypes are drawn from six NumPy dtypes that the process has met before, as
    a running engine's have: a new arena's Planner learns the process's resolved dtypes
    when it is made (:func:`arena.base.dtypes.seeds`), as NumPy keeps its own. The arena is
    presized for the request, or (``grown``) holds only the 256 bytes of a warm-up request,
    so that the first request grows the slot (releases the old buffer, allocates one of
    the request's size): issue 32 item 4 bounds both. Made outside the timed part: the
    arena, its warm-up request and the baseline's code, warmed. The baseline is written as a user
    writes it, one ``np.empty(shape, dtype)`` line per view: a loop over the specs charged its
    own iterations to NumPy, flattering arena.
    """
    import numpy as np

    dtypes = [np.dtype(n) for n in ("float32", "int32", "float16", "int8", "uint16", "int64")]
    rng = random.Random(views + grown)
    namespace: dict[str, Any] = {}
    # One call site for every trial: a new site costs its own first naming.
    request = step_function(["return get(*specs)"], namespace)
    first: list[float] = []
    empty: list[float] = []
    for _ in range(trials):
        specs = tuple(
            ((4,) * rng.randint(1, 4), dtypes[rng.randrange(len(dtypes))]) for _ in range(views)
        )
        baseline = _empty_baseline(specs)
        with Arena("cpu", framework="numpy") as arena:
            if not grown:
                arena.reserve_bytes(sum(4**4 * 8 for _ in range(views)) + views * 256)
            arena.get_simultaneous(((1,), np.uint8))  # the buffer's import, another plan
            namespace.update(get=arena.get_simultaneous, specs=specs)
            # No gc.collect() here: it leaves the CPU caches cold, which no request meets
            # in a running engine (that cost 3-4x the request itself, measured).
            gc.disable()
            try:
                start = time.perf_counter()
                request(0)
                first.append((time.perf_counter() - start) * 1e6)
                # Warmed first, as a user's code is: the interpreter quickens a new
                # function over its first calls (at 2000 views one of them took 15 times
                # a warm call, charged to NumPy).
                start = time.perf_counter()
                for _ in range(_WARM_CALLS):
                    baseline(0)
                warm = (time.perf_counter() - start) / _WARM_CALLS
                # Timed in batches of about _BATCH_S, the median batch: one loop of
                # `number` calls (60 ms at 2000 views) was preempted on a loaded machine,
                # which doubled NumPy's figure; the request is one short call.
                batch = max(1, min(number, int(_BATCH_S / max(warm, 1e-9))))
                batches = []
                for _ in range(max(1, number // batch)):
                    start = time.perf_counter()
                    for _ in range(batch):
                        baseline(0)
                    batches.append((time.perf_counter() - start) / batch * 1e6)
                empty.append(statistics.median(batches))
            finally:
                gc.enable()
            if grown and arena.stats().allocations < 2:
                raise AssertionError("the never-seen request did not grow the slot")
    per_trial = [f / e for f, e in zip(first, empty, strict=True)]
    return Paired(
        statistics.median(per_trial),
        quantile(per_trial, 0.1),
        quantile(per_trial, 0.9),
        statistics.median(first),
        statistics.median(empty),
        trials,
    )


def _empty_baseline(specs: tuple[tuple[Any, Any], ...]) -> Callable[[Any], Any]:
    """``step(T)`` calling ``np.empty(shape, dtype)`` once per spec, as a user writes it:
    one line per view, the shapes literal, the dtype objects bound once, no loop."""
    import numpy as np

    return step_function(
        [f"np.empty({shape!r}, d{i})" for i, (shape, _) in enumerate(specs)],
        {"np": np, **{f"d{i}": dtype for i, (_, dtype) in enumerate(specs)}},
    )


def layout_memo(rounds: int, number: int) -> Paired:
    """A memoised :func:`compute_layout` against a computed one (the memo cleared first),
    paired: ``number`` calls of each per round, back to back."""
    specs = attention(256)

    def memoised(_: Any) -> None:
        compute_layout(specs)

    def computed(_: Any) -> None:
        clear_layout_memo()
        compute_layout(specs)

    return paired(memoised, computed, range(max(1, number)), rounds)


def cache_memory() -> list[dict[str, Any]]:
    """Resident bytes per remembered 3-view request (the cost of a large view cache)."""
    figures = []
    for framework in _host():
        specs = specs_at(framework, _FIXED)
        with Arena("cpu", framework="numpy") as arena:
            front = arena.front(framework)
            arena.reserve(*specs(4096))
            gc.collect()
            before = _resident()
            for _ in range(2):  # a layout is remembered from its second sighting
                for tokens in range(1, 4097):
                    front.get_simultaneous(*specs(tokens))
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


def memory_figures() -> list[dict[str, Any]]:
    """Requested against reserved bytes of three workloads; growth peaks on the host."""
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


def poison_cost(rounds: int, number: int) -> list[dict[str, Any]]:
    """A locked hit with poisoning (``Arena(poison=True)``) against one without, paired."""
    rows: list[dict[str, Any]] = []
    for framework in _host():
        with (
            Arena("cpu", framework="numpy", poison=True) as on,
            Arena("cpu", framework="numpy") as off,
        ):
            hits = []
            for arena in (on, off):
                hits.append(_hit(arena.front(framework), framework))
                arena.lock()
            figure = paired(hits[0], hits[1], range(number), rounds)
        nbytes = sum(v.nbytes for v in compute_layout(attention(256)).views)
        rows.append({"framework": framework, "bytes": nbytes, **figure.record()})
    return rows


def gpu_growth_figure() -> dict[str, Any] | None:
    """Growth from 256 MiB to 512 MiB on ``cuda:0`` through CuPy: the driver's view."""
    if cuda_device_count() == 0 or importlib.util.find_spec("cupy") is None:
        return None
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
