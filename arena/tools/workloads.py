"""Realistic request workloads for ``python -m arena bench``, timed against baselines
written as a user writes them.

A workload is a request structure (views as ``(trailing shape, dtype)``, each view's
leading dimension a token count, or a multiple of it) and a sequence of token counts, one
per step: fixed, uniform over 1..8192, decode-heavy, padded to CUDA-graph buckets, an
MoE-like step with 5 views, 32 views, and 10 000 distinct layouts in rotation.

Every method is a function of one token count whose body is generated once per workload
and framework as straight-line code, exactly as a user would write the calls inline:

* ``arena``: ``front.get_simultaneous(((T, 32, 128), torch.bfloat16), ...)`` on a locked,
  presized arena, after one warm-up pass over the sequence (the steady state);
* ``alloc``: ``torch.empty((T, 32, 128), dtype=torch.bfloat16)`` per view (``np.empty``,
  ``cupy.empty``; for JAX, ``jnp.empty``, which dispatches a computation);
* ``reference``: what vLLM's WorkspaceManager does per call (sizes, running sums, then
  slice + dtype view + reshape of one ``uint8`` buffer). For JAX the reference imports
  each view per call through DLPack: the fair baseline, since the alternative to arena
  for viewing existing memory in JAX is an import per call, not an allocation.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from arena.core import Arena
from arena.views.layout import round_up

__all__ = ["WORKLOADS", "Workload", "WorkloadRow", "time_workload"]

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
    return [next(b for b in BUCKETS if b >= rng.randint(1, 512)) for _ in range(steps)]


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

WORKLOADS = (
    Workload("fixed", ATTENTION, lambda rng, steps: [256] * steps, 256),
    Workload("varying", ATTENTION, _uniform(1, 8192), 8192),
    Workload("decode-heavy", ATTENTION, _decode_heavy, 8192),
    Workload("graph buckets", ATTENTION, _buckets, 512),
    Workload("MoE 5 views", MOE, _uniform(1, 1024), 1024),
    Workload("32 views", THIRTY_TWO, lambda rng, steps: [64] * steps, 64),
    Workload("10^4 layouts", ATTENTION, _rotation, 10_000),
)


@dataclass
class WorkloadRow:
    """One workload on one framework: median microseconds per step, per method."""

    workload: str
    framework: str
    device: str
    median_us: dict[str, float]

    def ratio(self, top: str, bottom: str) -> float:
        """``median[top] / median[bottom]`` (nan when either is missing)."""
        a, b = self.median_us.get(top), self.median_us.get(bottom)
        return a / b if a and b else math.nan


def _dtype_names(framework: str, workload: Workload) -> list[str]:
    """How a user of ``framework`` names each dtype in source code."""
    names = []
    for _, _, name in workload.views:
        # NumPy-side DLPack (the JAX reference) and CuPy lack bfloat16: same size instead.
        dtype = "float16" if framework in ("jax", "cupy") and name == "bfloat16" else name
        prefix = {"torch": "torch", "numpy": "np", "cupy": "cupy", "jax": "jnp"}[framework]
        names.append(
            f"ml_dtypes.{dtype}"
            if framework == "numpy" and dtype == "bfloat16"
            else f"{prefix}.{dtype}"
        )
    return names


def _shape_code(multiple: int, rest: tuple[int, ...]) -> str:
    lead = "T" if multiple == 1 else (f"{multiple} * T" if multiple else "1")
    return f"({', '.join([lead, *map(str, rest)])}{',' if not rest else ''})"


def _generate(body: list[str], namespace: dict[str, Any]) -> Callable[[int], Any]:
    source = "def step(T):\n" + "\n".join(f"    {line}" for line in body)
    exec(compile(source, "<arena bench workload>", "exec"), namespace)
    return namespace["step"]  # type: ignore[no-any-return]


def _namespace(framework: str) -> dict[str, Any]:
    import numpy as np

    namespace: dict[str, Any] = {"np": np}
    try:
        import ml_dtypes

        namespace["ml_dtypes"] = ml_dtypes
    except ImportError:
        pass
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


def _spec_code(framework: str, workload: Workload) -> str:
    dtypes = _dtype_names(framework, workload)
    shapes = [_shape_code(m, rest) for m, rest, _ in workload.views]
    return ", ".join(f"({s}, {d})" for s, d in zip(shapes, dtypes, strict=True))


def _specs(framework: str, workload: Workload) -> Callable[[int], Any]:
    """``specs(T)``: the request at ``T`` tokens, with the framework's dtype objects."""
    return _generate([f"return ({_spec_code(framework, workload)},)"], _namespace(framework))


def _methods(
    framework: str, device: str, workload: Workload, front: Any, buffer: Any
) -> dict[str, Callable[[int], Any]]:
    namespace = _namespace(framework)
    dtypes = _dtype_names(framework, workload)
    shapes = [_shape_code(m, rest) for m, rest, _ in workload.views]
    specs = _spec_code(framework, workload)
    namespace.update(
        front=front,
        cached=front.arena.front(framework, cached=True),
        reference=_reference,
        buffer=buffer,
        framework=framework,
    )
    methods = {"arena": _generate([f"return front.get_simultaneous({specs})"], namespace)}
    methods["cached"] = _generate([f"return cached.get_simultaneous({specs})"], namespace)
    if framework == "jax":
        alloc = [
            f"v{i} = jnp.empty({s}, dtype={d})"
            for i, (s, d) in enumerate(zip(shapes, dtypes, strict=True))
        ]
        alloc.append(f"jax.block_until_ready([{', '.join(f'v{i}' for i in range(len(shapes)))}])")
    else:
        where = f", device={device!r}" if framework == "torch" and device != "cpu" else ""
        alloc = [
            f"v{i} = {_module(framework)}.empty({s}, dtype={d}{where})"
            for i, (s, d) in enumerate(zip(shapes, dtypes, strict=True))
        ]
    # jnp.empty compiles once per shape: on a varying workload it would time thousands of
    # compilations, which is no baseline for anything.
    if framework != "jax" or not workload.varies:
        methods["alloc"] = _generate(alloc, namespace)
    methods["reference"] = _generate(
        [f"return reference(framework, buffer, ({specs},))"], namespace
    )
    return methods


def _module(framework: str) -> str:
    return {"torch": "torch", "numpy": "np", "cupy": "cupy"}[framework]


def _reference(framework: str, buffer: Any, specs: Sequence[tuple[Any, Any]]) -> list[Any]:
    """vLLM's per-call arithmetic and slicing (a JAX DLPack import per view for JAX)."""
    actual = [math.prod(s) * _itemsize(d) for s, d in specs]
    aligned = [round_up(a, 256) for a in actual]
    offsets = list(itertools.accumulate([0, *aligned[:-1]]))
    views = [
        buffer[offsets[i] : offsets[i] + actual[i]].view(specs[i][1]).reshape(specs[i][0])
        for i in range(len(specs))
    ]
    if framework == "jax":
        import jax

        return [jax.dlpack.from_dlpack(v) for v in views]
    return views


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
    """Median microseconds per step of every method, interleaved over ``repeat`` rounds."""
    sequence = workload.tokens(random.Random(seed), steps)
    arena = Arena(device, framework="numpy" if device == "cpu" else framework)
    try:
        front = arena.front(framework)
        arena.reserve(*_specs(framework, workload)(workload.max_tokens))
        arena.lock()
        buffer = _reference_buffer(framework, arena)
        methods = _methods(framework, device, workload, front, buffer)
        for step in methods.values():  # warm-up: the steady state is what engines run
            for tokens in sequence:
                step(tokens)
        samples: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(repeat):
            for name, step in methods.items():
                start = time.perf_counter()
                for tokens in sequence:
                    step(tokens)
                samples[name].append((time.perf_counter() - start) / len(sequence) * 1e6)
        medians = {name: statistics.median(values) for name, values in samples.items()}
        return WorkloadRow(workload.name, framework, device, medians)
    finally:
        arena.close()


def _reference_buffer(framework: str, arena: Arena) -> Any:
    """The reference manager's own ``uint8`` buffer, as large as the arena's slot."""
    owner = arena.source.allocate(arena.stats().slots[0].capacity).owner
    if framework == "torch":
        from torch.utils.dlpack import from_dlpack

        return from_dlpack(owner)
    return owner
