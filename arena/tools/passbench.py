"""The bench's whole-pass figures: four decoder layers with their arithmetic, in a step,
in scopes, on the framework's own allocation and on tensors allocated once.

docs/planning.md's layers (hidden 64, 4 query and 2 KV heads of 16, intermediate 224) at
8 tokens, on the CPU, so that what a request costs shows next to the arithmetic. The same
pass (:func:`~arena.tools.decoder.layer_released`, :func:`~arena.tools.decoder.layer_scoped`)
runs four ways, written as a user writes them:

* ``steps``: one locked, replayed step per pass, each view released after its last use;
* ``scopes``: a forward scope holding the residual stream, and per layer a scope holding
  ``h`` with an attention and an MLP scope inside;
* ``empty``: the framework's own allocation, an inline ``torch.empty`` (``np.empty``) per
  view;
* ``floor``: the same arithmetic on tensors allocated once before the timed loop, where
  nothing is allocated;
* ``views``: the floor's tensors, a new view object of each per use, made as the front
  makes a replayed request's fresh views (``t.data``, ``a.view()``): what handing out a
  new tensor object per request costs on top of the floor, with no allocator at all
  (``steps/views`` is a step's cost beyond that).

torch runs under ``no_grad`` and under ``inference_mode`` (the whole life in the mode,
warm-up included, as an engine runs); NumPy once. Under ``inference_mode`` the same
rounds also time the steps and scopes passes on a torch front of inference tensors
(``ws.front("torch", inference=True)``), labelled ``inference front``
(:data:`INFERENCE_FRONT`, :func:`format_inference_front`): the floor's tensors are
``torch.empty``'s made inside the mode, inference tensors, while the default front hands
out normal tensors, which every in-place and ``out=`` op inside the mode pays autograd's
``ADInplaceOrView`` kernel for. In every mode the same rounds also time the steps and
scopes passes on a cached front (``ws.front(framework, cached=True)``, which hands the
very same view objects out again: no new tensor object per request), labelled ``cached
front`` (:data:`CACHED_FRONT`, :func:`format_cached_front`): what is left there is the
step's or scope's own work.

A round times the passes back to back (the order turned round every round); each ratio is
the median of the per-round ratios with its 10th-90th percentile spread (see
:mod:`arena.tools.timing`). The passes are timed by the **thread's CPU time**
(``time.thread_time``, :data:`CLOCK`), not the wall clock: every pass runs on this one
thread (torch is set to one thread), and on a machine shared with other work the wall
clock also counts the time slices other processes took while a pass waited, which moved
the per-round ratios between 0.5 and 2 at a load average of 6 where the thread's CPU time
kept them within 1.0 and 1.2 (``docs/performance.md``). The wall-clock medians are kept
beside them (``wall_*`` figures, a line under the table).
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
from arena.errors import ArenaError
from arena.tools.decoder import DOCS_LAYERS, DecoderShape, layer_released, layer_scoped
from arena.tools.timing import figure_spread, quantile

__all__ = [
    "CACHED_FRONT",
    "CLOCK",
    "INFERENCE_FRONT",
    "METHODS",
    "PASS_TARGETS",
    "TOKENS",
    "format_cached_front",
    "format_inference_front",
    "format_passes",
    "make_passes",
    "pass_figures",
]

#: Tokens per pass: few, so that allocation matters next to the arithmetic.
TOKENS = 8

#: The passes, in the order a round times them.
METHODS = ("steps", "scopes", "empty", "floor", "views")

#: The passes timed on a torch front of inference tensors too, under ``inference_mode``:
#: their figures are keyed ``inference_front_<method>``.
INFERENCE_FRONT = ("steps", "scopes")

#: The passes timed on a cached front too (``ws.front(framework, cached=True)``), in every
#: mode: their figures are keyed ``cached_front_<method>``.
CACHED_FRONT = ("steps", "scopes")

#: What the passes are timed by: the calling thread's CPU time (see the module doc).
CLOCK = "thread CPU time"

#: (method, baseline, limit): issue 32's whole-pass targets, per framework and mode.
PASS_TARGETS = (("steps", "floor", 1.03), ("scopes", "floor", 1.03))


class _NumpyOps:
    """docs/planning.md's arithmetic in NumPy (results written into scratch)."""

    def __init__(self, shape: DecoderShape, tokens: int) -> None:
        import numpy as np

        self.np, self.shape, self.tokens = np, shape, tokens
        self.mask = np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)

    def rmsnorm(self, x: Any, out: Any) -> Any:
        np = self.np
        return np.multiply(x, 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), out=out)

    def matmul(self, a: Any, b: Any, out: Any) -> Any:
        return self.np.matmul(a, b, out=out)

    def attention(self, qkv: Any, out: Any) -> Any:
        np, s, t = self.np, self.shape, self.tokens
        heads, kv, d = s.heads, s.kv_heads, s.head_dim
        q = qkv[:, : heads * d].reshape(t, heads, d)
        k = qkv[:, heads * d : (heads + kv) * d].reshape(t, kv, d)
        v = qkv[:, (heads + kv) * d :].reshape(t, kv, d)
        o = out.reshape(t, heads, d)
        for head in range(heads):
            g = head // (heads // kv)
            scores = q[:, head] @ k[:, g].T / np.sqrt(d) + self.mask
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            o[:, head] = (scores / scores.sum(-1, keepdims=True)) @ v[:, g]
        return out

    def silu_mul(self, gate_up: Any, out: Any) -> Any:
        i = self.shape.intermediate
        gate, up = gate_up[:, :i], gate_up[:, i:]
        return self.np.multiply(gate / (1 + self.np.exp(-gate)), up, out=out)

    def add_(self, x: Any, y: Any) -> Any:
        x += y
        return x


class _TorchOps:
    """The same arithmetic in torch."""

    def __init__(self, shape: DecoderShape, tokens: int) -> None:
        import torch
        from torch.nn import functional

        self.torch, self.f, self.shape, self.tokens = torch, functional, shape, tokens
        s = shape
        self.split = [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim]

    def rmsnorm(self, x: Any, out: Any) -> Any:
        torch = self.torch
        return torch.mul(x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), out=out)

    def matmul(self, a: Any, b: Any, out: Any) -> Any:
        return self.torch.matmul(a, b, out=out)

    def attention(self, qkv: Any, out: Any) -> Any:
        s, t = self.shape, self.tokens
        q, k, v = qkv.split(self.split, dim=1)
        q = q.unflatten(1, (s.heads, s.head_dim)).transpose(0, 1)
        k = k.unflatten(1, (s.kv_heads, s.head_dim)).transpose(0, 1)
        v = v.unflatten(1, (s.kv_heads, s.head_dim)).transpose(0, 1)
        o = self.f.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.view(t, s.heads, s.head_dim).copy_(o.transpose(0, 1))
        return out

    def silu_mul(self, gate_up: Any, out: Any) -> Any:
        i = self.shape.intermediate
        return self.torch.mul(self.f.silu(gate_up[:, :i]), gate_up[:, i:], out=out)

    def add_(self, x: Any, y: Any) -> Any:
        return x.add_(y)


def _kit(framework: str, shape: DecoderShape, tokens: int) -> tuple[Any, ...]:
    """The framework's arithmetic, dtype, and its random, empty, copy and alias (a new view
    object of a whole tensor) functions."""
    if framework == "torch":
        import torch

        ops: Any = _TorchOps(shape, tokens)
        dtype: Any = torch.float32
        generator = torch.Generator().manual_seed(0)

        def random(*size: int) -> Any:
            return torch.randn(*size, generator=generator, dtype=dtype) / 8

        def empty(size: tuple[int, ...]) -> Any:
            # The sizes as separate arguments: the cheapest spelling (a tuple costs
            # torch 1.55 against 0.85 us on this machine's CPU).
            return torch.empty(*size, dtype=dtype)

        def copy(out: Any, x: Any) -> None:
            out.copy_(x)

        def alias(x: Any) -> Any:
            return x.data  # as the torch front makes a fresh view (adapters/torch.py)

    else:
        import numpy as np

        ops = _NumpyOps(shape, tokens)
        dtype = "float32"
        rng = np.random.default_rng(0)

        def random(*size: int) -> Any:
            return rng.standard_normal(size, np.float32) / 8

        float32 = np.dtype(np.float32)  # a dtype object: the cheapest spelling

        def empty(size: tuple[int, ...]) -> Any:
            return np.empty(size, float32)

        def copy(out: Any, x: Any) -> None:
            out[...] = x

        def alias(x: Any) -> Any:
            return x.view()  # as the NumPy front makes a fresh view (adapters/numpy.py)

    return ops, dtype, random, empty, copy, alias


def make_passes(
    framework: str, front: Any, shape: DecoderShape, tokens: int
) -> dict[str, Callable[[], Any]]:
    """The four passes of :data:`METHODS` on ``front`` (a locked arena's, for the figures),
    each returning its output (copied out of scratch), over one set of weights and tokens:
    every pass computes the same arithmetic, bitwise."""
    ops, dtype, random, empty, copy, alias = _kit(framework, shape, tokens)
    s, t = shape, tokens
    weights = [
        {
            "qkv": random(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim),
            "o": random(s.heads * s.head_dim, s.hidden),
            "gate_up": random(s.hidden, 2 * s.intermediate),
            "down": random(s.intermediate, s.hidden),
        }
        for _ in range(s.layers)
    ]
    tokens_in, result = random(t, s.hidden), empty((t, s.hidden))
    hidden = ((t, s.hidden), dtype)

    def none(*_views: Any) -> None:
        pass

    def released(get: Callable[[tuple[int, int]], Any], release: Callable[..., Any]) -> Any:
        """The pass with each tensor from ``get`` and given to ``release`` after its last
        use; its output copied out."""
        x = get((t, s.hidden))
        copy(x, tokens_in)
        for w in weights:
            x = layer_released(ops, get, release, x, w, shape=s, tokens=t)
        copy(result, x)
        return result

    def steps() -> Any:
        with front.step("pass") as st:
            request = st.get_simultaneous

            def get(size: tuple[int, int]) -> Any:
                return request((size, dtype))[0]

            return released(get, st.release)

    def scopes() -> Any:
        scope = front.scope
        with scope() as forward:
            x, y = forward.get_simultaneous(hidden, hidden)
            copy(x, tokens_in)
            for w in weights:
                x, y = layer_scoped(ops, scope, x, y, w, shape=s, tokens=t), x
            copy(result, x)
        return result

    def allocated() -> Any:
        def get(size: tuple[int, int]) -> Any:
            return empty(size)

        return released(get, none)

    # The floor: every tensor the pass uses, allocated once, in request order.
    sizes: list[tuple[int, int]] = []

    def listing(size: tuple[int, int]) -> Any:
        sizes.append(size)
        return empty(size)

    released(listing, none)
    held = [empty(size) for size in sizes]

    def floor() -> Any:
        take = iter(held).__next__

        def get(_size: tuple[int, int]) -> Any:
            return take()

        return released(get, none)

    def views() -> Any:
        take = iter(held).__next__

        def get(_size: tuple[int, int]) -> Any:
            return alias(take())

        return released(get, none)

    return {"steps": steps, "scopes": scopes, "empty": allocated, "floor": floor, "views": views}


Times = dict[str, list[float]]


def _timed(passes: dict[str, Callable[[], Any]], rounds: int, reps: int) -> tuple[Times, Times]:
    """Microseconds per pass of each method, ``rounds`` times, back to back (the order
    turned round every round), with the collector paused: by the thread's CPU time and by
    the wall clock, both read around the same block (the wall clock inside, so that it
    does not count the CPU clock's own reads: 0.45 us each, against 0.1 us)."""
    cpu: Times = {name: [] for name in passes}
    wall: Times = {name: [] for name in passes}
    order = list(passes.items())
    thread_time, perf_counter = time.thread_time, time.perf_counter
    enabled = gc.isenabled()
    gc.disable()
    try:
        for index in range(rounds):
            for name, run in order if index % 2 == 0 else order[::-1]:
                cpu_start = thread_time()
                start = perf_counter()
                for _ in range(reps):
                    run()
                end = perf_counter()
                cpu_end = thread_time()
                cpu[name].append((cpu_end - cpu_start) / reps * 1e6)
                wall[name].append((end - start) / reps * 1e6)
    finally:
        if enabled:
            gc.enable()
    return cpu, wall


#: Plain requests per timed block of :func:`_requests`.
REQUESTS = 100


def _passes_dtype(framework: str) -> Any:
    """The dtype of every tensor of the passes."""
    return _kit(framework, DOCS_LAYERS, TOKENS)[1]


def _requests(front: Any, spec: tuple[Any, ...]) -> Callable[[], None]:
    """:data:`REQUESTS` plain requests of ``spec`` (one view), made once first: a block a
    locked arena serves from its hit."""
    get = front.get_simultaneous
    get(spec)
    get(spec)

    def block() -> None:
        for _ in range(REQUESTS):
            get(spec)

    return block


def _modes(framework: str) -> dict[str, Callable[[], Any]]:
    if framework != "torch":
        return {"-": contextlib.nullcontext}
    import torch

    return {"no_grad": torch.no_grad, "inference": torch.inference_mode}


def _ratio(top: list[float], bottom: list[float]) -> dict[str, float]:
    per_round = [a / b for a, b in zip(top, bottom, strict=True)]
    return {
        "median": statistics.median(per_round),
        "p10": quantile(per_round, 0.1),
        "p90": quantile(per_round, 0.9),
    }


def _framework_figures(framework: str, rounds: int, reps: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for mode, enter in _modes(framework).items():
        inference = framework == "torch" and mode == "inference"
        with Arena("cpu", framework=framework) as ws, enter():
            passes = make_passes(framework, ws.front(framework), DOCS_LAYERS, TOKENS)
            # The same rounds: paired with the default front's passes.
            cached = make_passes(framework, ws.front(framework, cached=True), DOCS_LAYERS, TOKENS)
            for name in CACHED_FRONT:
                passes[f"cached_front_{name}"] = cached[name]
            if inference:
                front = ws.front(framework, inference=True)
                extra = make_passes(framework, front, DOCS_LAYERS, TOKENS)
                for name in INFERENCE_FRONT:
                    passes[f"inference_front_{name}"] = extra[name]
            outputs = {}
            for _ in range(3):  # record, plan, replay (and remember)
                for name, run in passes.items():
                    outputs[name] = _digest(framework, run())
            if len(set(outputs.values())) != 1:
                raise ArenaError(f"the {framework} passes disagree: {sorted(outputs)}")
            ws.lock()
            t, wall = _timed(passes, rounds, reps)
            if inference:  # a plain locked request on either front, in the same rounds
                spec = ((TOKENS, DOCS_LAYERS.hidden), _passes_dtype(framework))
                # (wall clock: a block of 100 requests is about 36 us, and the thread's
                # CPU time costs 0.45 us a read against 0.1 us)
                _, plain = _timed(
                    {
                        "plain": _requests(ws.front(framework), spec),
                        "inference_front_plain": _requests(front, spec),
                    },
                    rounds,
                    reps,
                )
        figures: dict[str, Any] = {
            f"{name}_us": statistics.median(values) for name, values in t.items()
        }
        figures["clock"] = CLOCK
        for top, bottom in (
            ("steps", "floor"),
            ("scopes", "floor"),
            ("empty", "floor"),
            ("steps", "empty"),
            ("scopes", "empty"),
            ("views", "floor"),
            ("steps", "views"),
        ):
            figures[f"{top}_over_{bottom}"] = _ratio(t[top], t[bottom])
        for top in ("steps", "scopes", "views"):
            figures[f"wall_{top}_over_floor"] = _ratio(wall[top], wall["floor"])
        for name in CACHED_FRONT:
            mine = f"cached_front_{name}"
            figures[f"{mine}_over_floor"] = _ratio(t[mine], t["floor"])
            figures[f"{mine}_over_views"] = _ratio(t[mine], t["views"])
            figures[f"{mine}_over_{name}"] = _ratio(t[mine], t[name])
        if inference:
            for name in ("plain", "inference_front_plain"):
                figures[f"{name}_request_us"] = statistics.median(plain[name]) / REQUESTS
            figures["inference_front_plain_over_plain"] = _ratio(
                plain["inference_front_plain"], plain["plain"]
            )
            for name in INFERENCE_FRONT:
                mine = f"inference_front_{name}"
                figures[f"{mine}_over_floor"] = _ratio(t[mine], t["floor"])
                figures[f"{mine}_over_empty"] = _ratio(t[mine], t["empty"])
                figures[f"{mine}_over_{name}"] = _ratio(t[mine], t[name])
        figures["rounds"] = rounds
        found[mode] = figures
    return found


def _digest(framework: str, result: Any) -> bytes:
    """The output's bytes: every pass computes the same arithmetic, bitwise."""
    if framework == "torch":
        return bytes(result.numpy().tobytes())
    return bytes(result.tobytes())


def pass_figures(quick: bool) -> dict[str, Any]:
    """The figures per framework (NumPy, torch where installed) and mode; torch on one
    thread (at these sizes more threads only wait for each other, and on a loaded
    machine a waiting thread can hold up a pass a hundredfold)."""
    rounds, reps = (7, 3) if quick else (31, 10)
    found = {}
    for framework in ("numpy", "torch"):
        if importlib.util.find_spec(framework) is None:
            continue
        if framework != "torch":
            found[framework] = _framework_figures(framework, rounds, reps)
            continue
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            found[framework] = _framework_figures(framework, rounds, reps)
        finally:
            torch.set_num_threads(threads)
    return found


def format_passes(figures: dict[str, Any]) -> list[str]:
    """The figures as table lines."""
    cell = figure_spread  # a column's text: median (p10 to p90)
    every = [f for modes in figures.values() for f in modes.values()]
    # (a run from before the passes were timed by the thread's CPU time has no "clock")
    clock = every[0].get("clock", "wall clock") if every else CLOCK
    lines = [
        "",
        f"whole passes: {DOCS_LAYERS.describe()}, {TOKENS} tokens, CPU (us per pass by the "
        f"{clock}; median of per-round ratios, p10 to p90)",
        f"{'framework':<10}{'mode':<11}{'steps/floor':>24}{'scopes/floor':>24}"
        f"{'empty/floor':>24}{'views/floor':>24}{'steps/views':>24}{'steps us':>10}"
        f"{'scopes us':>10}{'empty us':>10}{'floor us':>10}{'views us':>10}",
    ]
    for framework, modes in figures.items():
        for mode, f in modes.items():
            lines.append(
                f"{framework:<10}{mode:<11}{cell(f['steps_over_floor']):>24}"
                f"{cell(f['scopes_over_floor']):>24}{cell(f['empty_over_floor']):>24}"
                f"{cell(f['views_over_floor']):>24}{cell(f['steps_over_views']):>24}"
                f"{f['steps_us']:>10.1f}{f['scopes_us']:>10.1f}{f['empty_us']:>10.1f}"
                f"{f['floor_us']:>10.1f}{f['views_us']:>10.1f}"
            )
    lines.append(
        "views: the floor's tensors, a new view object of each per use as the front makes "
        "one (no allocator): steps/views is a step's cost beyond handing out new objects"
    )
    for framework, modes in figures.items():
        for mode, f in modes.items():
            if "wall_steps_over_floor" in f:
                where = framework if mode == "-" else f"{framework} {mode}"
                lines.append(
                    f"{where}, by the wall clock in the same rounds: steps/floor "
                    f"{cell(f['wall_steps_over_floor'])}, scopes/floor "
                    f"{cell(f['wall_scopes_over_floor'])}, views/floor "
                    f"{cell(f['wall_views_over_floor'])}"
                )
    return lines


def format_cached_front(figures: dict[str, Any]) -> list[str]:
    """The cached front's figures (every framework and mode) as table lines; none where
    they were not measured."""
    rows = [
        (framework, mode, f)
        for framework, modes in figures.items()
        for mode, f in modes.items()
        if "cached_front_steps_us" in f
    ]
    if not rows:
        return []
    cell = figure_spread  # a column's text: median (p10 to p90)
    lines = [
        "",
        "whole passes on a cached front (ws.front(framework, cached=True): the same view "
        "objects handed out again): the same rounds as the default front's",
        f"{'framework':<10}{'mode':<11}{'pass':<8}{'/floor':>24}{'/views':>24}"
        f"{'/default front':>24}{'us':>10}",
    ]
    for framework, mode, f in rows:
        for name in CACHED_FRONT:
            mine = f"cached_front_{name}"
            lines.append(
                f"{framework:<10}{mode:<11}{name:<8}{cell(f[f'{mine}_over_floor']):>24}"
                f"{cell(f[f'{mine}_over_views']):>24}{cell(f[f'{mine}_over_{name}']):>24}"
                f"{f[f'{mine}_us']:>10.1f}"
            )
    lines.append(
        "/views: over the pass that makes a new view object per use with no allocator (a "
        "cached front makes none: below 1, it saves more than its own work costs)"
    )
    return lines


def format_inference_front(figures: dict[str, Any]) -> list[str]:
    """The inference front's figures (torch under ``inference_mode``) as table lines;
    none where they were not measured."""
    f = figures.get("torch", {}).get("inference", {})
    if "inference_front_steps_us" not in f:
        return []

    cell = figure_spread  # a column's text: median (p10 to p90)
    lines = [
        "",
        "whole passes, torch under inference_mode, inference front "
        '(ws.front("torch", inference=True)): the same rounds as the default front\'s',
        f"{'pass':<8}{'/floor':>24}{'/empty':>24}{'/default front':>24}{'us':>10}",
    ]
    for name in INFERENCE_FRONT:
        mine = f"inference_front_{name}"
        lines.append(
            f"{name:<8}{cell(f[f'{mine}_over_floor']):>24}{cell(f[f'{mine}_over_empty']):>24}"
            f"{cell(f[f'{mine}_over_{name}']):>24}{f[f'{mine}_us']:>10.1f}"
        )
    lines.append(
        f"a plain locked request ({TOKENS}x{DOCS_LAYERS.hidden} float32, {REQUESTS} per "
        f"block): {f['inference_front_plain_request_us']:.3f} us on the inference front, "
        f"{f['plain_request_us']:.3f} us on the default front: "
        f"{cell(f['inference_front_plain_over_plain'])}"
    )
    return lines
