"""Realistic request workloads for ``python -m arena bench``, timed against baselines
written as a user writes them.

A workload is a request structure (views as ``(trailing shape, dtype)``, each view's
leading dimension a token count, or a multiple of it) and a sequence of token counts, one
per step: fixed, uniform over 1..2048 (every view under 32 MiB) and over 1..8192 (the
largest views 64 MiB), decode-heavy, padded to CUDA-graph buckets, an MoE-like step with
5 views, 32 views, 10 000 distinct layouts in rotation, the fixed step on an arena of
two micro-batch slots (vLLM's dual micro-batch mode), and a small model's attention step
with every view under 4 MiB at 16, 512 and 2048 distinct layouts in rotation (from 4 MiB
up NumPy asks for huge pages, which makes ``np.empty`` several times dearer and flatters
any arena).

Every method is a function of one token count whose body is generated once per workload
and framework as straight-line code, exactly as a user would write the calls inline, with
the cheapest spelling: the dtype objects are names bound once (``d0 = torch.bfloat16``,
``d0 = np.dtype(ml_dtypes.bfloat16)``), not attribute lookups or conversions per call.

* ``arena``: ``front.get_simultaneous(((T, 32, 128), d0), ...)`` on a locked, presized
  arena, after one warm-up pass over the sequence (the steady state);
* ``alloc``: ``torch.empty((T, 32, 128), dtype=d0)`` per view (``np.empty((T, 32, 128),
  d0)``, ``cupy.empty``; for JAX, ``jnp.empty``, which dispatches a computation);
* ``reference``: ``current_workspace_manager().get_simultaneous(((T, 32, 128), d0), ...)``,
  the call as a vLLM module spells it, running vLLM's WorkspaceManager code over one
  presized ``uint8`` buffer (:mod:`arena.tools.vllmref`: sizes, running sums, then slice +
  dtype view + reshape). For JAX the reference imports each view per call through DLPack:
  the fair baseline, since the alternative to arena for viewing existing memory in JAX is
  an import per call, not an allocation.

Each round runs every method over the whole sequence, back to back; a row reports each
method's median over the rounds and, for ``arena`` against each baseline, the median of
the per-round ratios with their 10th-90th percentile spread (:mod:`arena.tools.timing`).
"""

from __future__ import annotations

import gc
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.base.layout import round_up
from arena.core import Arena
from arena.tools import vllmref
from arena.tools.timing import ratios

__all__ = ["WORKLOADS", "Workload", "WorkloadRow", "specs_at", "step_function", "time_workload"]

#: CUDA-graph capture sizes in the style of vLLM: 1, 2, 4, then multiples of 8 to 512.
BUCKETS = (1, 2, 4, *range(8, 513, 8))


@dataclass(frozen=True)
class Workload:
    """A request structure and how its token count moves from step to step.

    Attributes
    ----------
    name : str
        Short name, for tables.
    views : tuple of (int, tuple of int, str)
        Per view: the multiple of the token count its leading dimension is (0 for a
        fixed leading dimension of 1), its trailing shape, and its dtype name.
    tokens : callable
        ``tokens(random.Random, steps)`` -> the token count of every step.
    max_tokens : int
        The largest token count the sequence can hold (the arena is presized for it).
    """

    name: str
    views: tuple[tuple[int, tuple[int, ...], str], ...]
    tokens: Callable[[random.Random, int], list[int]]
    max_tokens: int
    #: Micro-batch slots of the arena (requests run on the last one).
    ubatches: int = 1

    @property
    def varies(self) -> bool:
        """Whether the token count changes from step to step."""
        return len(set(self.tokens(random.Random(0), 64))) > 1

    def shapes(self, tokens: int) -> list[tuple[int, ...]]:
        """Every view's shape at ``tokens`` tokens."""
        return [((m * tokens if m else 1), *rest) for m, rest, _ in self.views]


def _uniform(low: int, high: int) -> Callable[[random.Random, int], list[int]]:
    return lambda rng, steps: [rng.randint(low, high) for _ in range(steps)]


def _decode_heavy(rng: random.Random, steps: int) -> list[int]:
    # 90 % decode steps (a few tokens per running request), 10 % prefill chunks.
    return [
        rng.randint(1, 64) if rng.random() < 0.9 else rng.randint(256, 8192) for _ in range(steps)
    ]


def _buckets(rng: random.Random, steps: int) -> list[int]:
    return [_bucket(rng) for _ in range(steps)]


def _bucket(rng: random.Random) -> int:
    # A loop, not next() over a generator (one left suspended loses an interrupt landing
    # in its close); the same draws, one per bucket tried (the last, 512, always fits).
    bucket: int
    for bucket in BUCKETS:
        if bucket >= rng.randint(1, 512):
            break
    return bucket


def _rotation(rng: random.Random, steps: int) -> list[int]:
    return [1 + step % 10_000 for step in range(steps)]


ATTENTION = ((1, (32, 128), "bfloat16"), (1, (32,), "float32"), (1, (), "int32"))
MOE = (
    (1, (2048,), "bfloat16"),
    (1, (64,), "float32"),
    (1, (8,), "float32"),
    (8, (2048,), "bfloat16"),
    (8, (1024,), "bfloat16"),
)
THIRTY_TWO = tuple(
    (1, (16 * (1 + i % 4),), ("bfloat16", "float32", "int32", "float16")[i % 4]) for i in range(32)
)


def _fixed(rng: random.Random, steps: int) -> list[int]:
    return [256] * steps


def _layouts(count: int) -> Callable[[random.Random, int], list[int]]:
    """``count`` distinct token counts from 1..2048 (drawn once per sequence), in rotation:
    each step takes the next one, and the order is shuffled anew on every pass, so a cache
    of fewer than ``count`` layouts cannot hold the next one."""

    def tokens(rng: random.Random, steps: int) -> list[int]:
        chosen = rng.sample(range(1, 2049), count)
        sequence: list[int] = []
        while len(sequence) < steps:
            rng.shuffle(chosen)
            sequence += chosen
        return sequence[:steps]

    return tokens


#: A small model's attention step (Qwen2-0.5B: 14 heads of 64): every view under 4 MiB at
#: up to 2048 tokens (the bf16 view 3.5 MiB at most). From 4 MiB up NumPy asks the kernel
#: for huge pages, which makes ``np.empty`` several times dearer; here it never does.
SMALL_ATTENTION = ((1, (14, 64), "bfloat16"), (1, (14,), "float32"), (1, (), "int32"))


WORKLOADS = (
    Workload("fixed", ATTENTION, _fixed, 256),
    Workload("varying <32 MiB", ATTENTION, _uniform(1, 2048), 2048),
    Workload("varying", ATTENTION, _uniform(1, 8192), 8192),
    Workload("decode-heavy", ATTENTION, _decode_heavy, 8192),
    Workload("graph buckets", ATTENTION, _buckets, 512),
    Workload("MoE 5 views", MOE, _uniform(1, 1024), 1024),
    Workload("32 views", THIRTY_TWO, lambda rng, steps: [64] * steps, 64),
    Workload("10^4 layouts", ATTENTION, _rotation, 10_000),
    Workload("2 slots", ATTENTION, _fixed, 256, ubatches=2),
    Workload("<4 MiB, 16 layouts", SMALL_ATTENTION, _layouts(16), 2048),
    Workload("<4 MiB, 512 layouts", SMALL_ATTENTION, _layouts(512), 2048),
    Workload("<4 MiB, 2048 layouts", SMALL_ATTENTION, _layouts(2048), 2048),
)


@dataclass
class WorkloadRow:
    """One workload on one framework: median microseconds per step, per method, and the
    paired ratios of ``arena`` to each baseline.

    Attributes
    ----------
    median_us : dict
        Method -> median microseconds per step over the rounds.
    ratios : dict
        ``"arena/alloc"``, ``"arena/ref"`` -> the median per-round ratio, and the same
        names with `` p10`` / `` p90`` -> its spread.
    """

    workload: str
    framework: str
    device: str
    median_us: dict[str, float]
    ratios: dict[str, float] = field(default_factory=dict)

    def ratio(self, top: str, bottom: str) -> float:
        """The paired ratio of ``arena`` to ``alloc`` or ``reference`` where measured;
        else ``median[top] / median[bottom]`` (nan when either is missing)."""
        paired = self.ratios.get(f"{top}/{_SHORT.get(bottom, bottom)}")
        if paired is not None:
            return paired
        a, b = self.median_us.get(top), self.median_us.get(bottom)
        return a / b if a and b else math.nan

    def spread(self, top: str, bottom: str) -> tuple[float, float]:
        """The 10th and 90th percentiles of a paired ratio (nan, nan when not paired)."""
        name = f"{top}/{_SHORT.get(bottom, bottom)}"
        return self.ratios.get(f"{name} p10", math.nan), self.ratios.get(f"{name} p90", math.nan)


_SHORT = {"reference": "ref"}


def _dtypes(framework: str, workload: Workload) -> list[Any]:
    """The dtype object a user of ``framework`` holds for each view (bound once as a name:
    the cheapest spelling). NumPy, CuPy and JAX get ``np.dtype`` instances, which
    ``np.empty`` takes without a conversion; torch its ``torch.dtype`` objects."""
    import numpy as np

    objects = []
    for _, _, view_dtype in workload.views:
        # NumPy-side DLPack (the JAX reference) and CuPy lack bfloat16: same size instead.
        lacks = framework in ("jax", "cupy") and view_dtype == "bfloat16"
        name = "float16" if lacks else view_dtype
        if framework == "torch":
            import torch

            objects.append(getattr(torch, name))
        elif name == "bfloat16":
            import ml_dtypes

            objects.append(np.dtype(ml_dtypes.bfloat16))
        else:
            objects.append(np.dtype(name))
    return objects


def _shape_code(multiple: int, rest: tuple[int, ...]) -> str:
    lead = "T" if multiple == 1 else (f"{multiple} * T" if multiple else "1")
    return f"({', '.join([lead, *map(str, rest)])}{',' if not rest else ''})"


def step_function(body: list[str], namespace: dict[str, Any]) -> Callable[[int], Any]:
    """``step(T)`` with ``body``, compiled in ``namespace`` under a file name outside the
    package: its calls are user code (the call site a request names)."""
    source = "def step(T):\n" + "\n".join(f"    {line}" for line in body)
    exec(compile(source, "<arena bench workload>", "exec"), namespace)
    return namespace["step"]  # type: ignore[no-any-return]


def _namespace(framework: str, workload: Workload) -> dict[str, Any]:
    import numpy as np

    namespace: dict[str, Any] = {"np": np}
    namespace.update({f"d{i}": d for i, d in enumerate(_dtypes(framework, workload))})
    if framework == "torch":
        import torch

        namespace["torch"] = torch
    if framework == "cupy":
        import cupy

        namespace["cupy"] = cupy
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        namespace.update(jax=jax, jnp=jnp)
    return namespace


def _spec_code(workload: Workload) -> str:
    shapes = [_shape_code(m, rest) for m, rest, _ in workload.views]
    return ", ".join(f"({s}, d{i})" for i, s in enumerate(shapes))


def specs_at(framework: str, workload: Workload) -> Callable[[int], Any]:
    """``specs(T)``: the request at ``T`` tokens, with the framework's dtype objects."""
    return step_function([f"return ({_spec_code(workload)},)"], _namespace(framework, workload))


def _methods(
    framework: str, device: str, workload: Workload, front: Any, buffer: Any
) -> dict[str, Callable[[int], Any]]:
    namespace = _namespace(framework, workload)
    shapes = [_shape_code(m, rest) for m, rest, _ in workload.views]
    specs = _spec_code(workload)
    namespace.update(
        front=front,
        cached=front.arena.front(framework, cached=True),
        reference=_reference,
        buffer=buffer,
        framework=framework,
    )
    methods = {"arena": step_function([f"return front.get_simultaneous({specs})"], namespace)}
    methods["cached"] = step_function([f"return cached.get_simultaneous({specs})"], namespace)
    if framework == "jax":
        alloc = [f"v{i} = jnp.empty({s}, d{i})" for i, s in enumerate(shapes)]
        alloc.append(f"jax.block_until_ready([{', '.join(f'v{i}' for i in range(len(shapes)))}])")
    elif framework == "torch":
        where = f", device={device!r}" if device != "cpu" else ""
        alloc = [f"torch.empty({s}, dtype=d{i}{where})" for i, s in enumerate(shapes)]
    else:
        alloc = [f"{_module(framework)}.empty({s}, d{i})" for i, s in enumerate(shapes)]
    # jnp.empty compiles once per shape: on a varying workload it would time thousands of
    # compilations, which is no baseline for anything.
    if framework != "jax" or not workload.varies:
        methods["alloc"] = step_function(alloc, namespace)
    if framework == "jax":
        methods["reference"] = step_function(
            [f"return reference(framework, buffer, ({specs},))"], namespace
        )
    else:
        # A vLLM module's own spelling: the process's manager, then its get_simultaneous.
        vllmref.init_workspace_manager([buffer])
        namespace["current_workspace_manager"] = vllmref.current_workspace_manager
        methods["reference"] = step_function(
            [f"return current_workspace_manager().get_simultaneous({specs})"], namespace
        )
    return methods


def _module(framework: str) -> str:
    return {"torch": "torch", "numpy": "np", "cupy": "cupy"}[framework]


def _reference(framework: str, buffer: Any, specs: Sequence[tuple[Any, Any]]) -> list[Any]:
    """JAX's reference: vLLM's per-call arithmetic and slicing of a NumPy buffer, then a
    DLPack import per view (viewing existing memory in JAX without arena)."""
    import jax

    actual = [math.prod(s) * _itemsize(d) for s, d in specs]
    aligned = [round_up(a, 256) for a in actual]
    offsets = list(itertools.accumulate([0, *aligned[:-1]]))
    return [
        jax.dlpack.from_dlpack(
            buffer[offsets[i] : offsets[i] + actual[i]].view(specs[i][1]).reshape(specs[i][0])
        )
        for i in range(len(specs))
    ]


def _itemsize(dtype: Any) -> int:
    size = _ITEMSIZES.get(dtype)
    if size is None:
        import numpy as np

        # torch dtypes carry an int itemsize; NumPy, ml_dtypes and JAX scalar types do not.
        size = dtype.itemsize if type(dtype).__module__ == "torch" else np.dtype(dtype).itemsize
        size = _ITEMSIZES[dtype] = int(size)
    return size


_ITEMSIZES: dict[Any, int] = {}


def time_workload(
    workload: Workload, framework: str, device: str, *, steps: int, repeat: int, seed: int = 0
) -> WorkloadRow:
    """Every method over the workload's sequence, ``repeat`` rounds, back to back (the
    order rotates between rounds); the medians and the paired ratios of ``arena``."""
    sequence = workload.tokens(random.Random(seed), steps)
    arena = Arena(
        device,
        framework="numpy" if device == "cpu" else framework,
        ubatches=workload.ubatches,
    )
    try:
        arena.bind_ubatch(workload.ubatches - 1)
        front = arena.front(framework)
        arena.reserve(*specs_at(framework, workload)(workload.max_tokens))
        arena.lock()
        buffer = _reference_buffer(framework, arena)
        methods = _methods(framework, device, workload, front, buffer)
        for step in methods.values():  # warm-up: the steady state is what engines run
            for tokens in sequence:
                step(tokens)
        samples: dict[str, list[float]] = {name: [] for name in methods}
        order = list(methods.items())
        enabled = gc.isenabled()
        gc.disable()
        try:
            for index in range(repeat):
                rotated = order[index % len(order) :] + order[: index % len(order)]
                for name, step in rotated:
                    start = time.perf_counter()
                    for tokens in sequence:
                        step(tokens)
                    samples[name].append((time.perf_counter() - start) / len(sequence) * 1e6)
        finally:
            if enabled:
                gc.enable()
        medians = {name: statistics.median(values) for name, values in samples.items()}
        paired: dict[str, float] = {}
        for baseline in ("alloc", "reference"):
            if baseline in samples:
                figures = ratios(samples["arena"], samples[baseline])
                name = f"arena/{_SHORT.get(baseline, baseline)}"
                paired.update(
                    {name: figures.median, f"{name} p10": figures.p10, f"{name} p90": figures.p90}
                )
        return WorkloadRow(workload.name, framework, device, medians, paired)
    finally:
        arena.bind_ubatch(0)
        arena.close()


def _reference_buffer(framework: str, arena: Arena) -> Any:
    """The reference manager's own ``uint8`` buffer, as large as the arena's slot."""
    owner = arena.source.allocate(arena.stats().slots[0].capacity).owner
    if framework == "torch":
        from torch.utils.dlpack import from_dlpack

        return from_dlpack(owner)
    return owner
