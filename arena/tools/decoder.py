"""Chained decoder layers as a program of requests, shared by the planning bench
(:mod:`arena.tools.planbench`) and the demo.

The same forward pass is written twice, as a user writes it: once for a step
(:func:`forward_steps`: every view released after its last use) and once for nested
scopes (:func:`forward_scopes`: what outlives a part of the layer is asked for before that
part's scope opens). :func:`plain_specs` lists every view (what plain requests ask for
together) and :func:`dry_bytes` gives the byte figures of all three from layouts alone.

The whole-pass bench (:mod:`arena.tools.passbench`) runs the pass with its arithmetic:
:func:`layer_released` is one layer written with a scratch function and a release (a
step's, the framework's own allocation, or tensors allocated once), :func:`layer_scoped`
the same layer in nested scopes; the arithmetic is a :class:`LayerOps`' (NumPy's or
torch's), the sizes :data:`DOCS_LAYERS` (docs/planning.md's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from arena.base.layout import DEFAULT_ALIGNMENT, compute_layout, round_up
from arena.planning.offsets import plan_offsets

__all__ = [
    "DOCS_LAYERS",
    "LLAMA_8B",
    "DecoderShape",
    "DryStep",
    "LayerOps",
    "Requester",
    "Spec",
    "dry_bytes",
    "forward_scopes",
    "forward_steps",
    "layer_released",
    "layer_scoped",
    "plain_specs",
]


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of a stack of decoder layers (Llama-style: RMSNorm, grouped-query
    attention, gated MLP)."""

    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    layers: int = 4
    dtype: str = "bfloat16"

    def describe(self) -> str:
        """``"4 layers, hidden 4096, intermediate 14336, 32 x 128 heads, 8 KV heads, bfloat16"``."""
        return (
            f"{self.layers} layers, hidden {self.hidden}, intermediate {self.intermediate}, "
            f"{self.heads} x {self.head_dim} heads, {self.kv_heads} KV heads, {self.dtype}"
        )


#: Llama-3-8B's layer sizes, four layers.
LLAMA_8B = DecoderShape()

#: docs/planning.md's layers: small enough (at 8 tokens) that allocation matters next to
#: the arithmetic.
DOCS_LAYERS = DecoderShape(
    hidden=64, intermediate=224, heads=4, kv_heads=2, head_dim=16, layers=4, dtype="float32"
)

Spec = tuple[tuple[int, ...], str]


class Requester(Protocol):
    """What the step program needs: a step (:class:`~arena.planning.steps.Step`) or a
    dry run of one."""

    def get_simultaneous(self, *specs: Spec) -> list[Any]:
        """Views for ``specs``."""
        ...

    def release(self, *views: Any) -> None:
        """End the life of ``views``."""


def forward_steps(step: Requester, shape: DecoderShape, tokens: int) -> None:
    """The forward pass inside one step, each view released after its last use."""
    t, d = tokens, shape.dtype
    hidden = ((t, shape.hidden), d)
    (x,) = step.get_simultaneous(hidden)  # the embedding output
    for _ in range(shape.layers):
        (xn,) = step.get_simultaneous(hidden)  # input RMSNorm
        q, k, v = step.get_simultaneous(
            ((t, shape.heads * shape.head_dim), d),
            ((t, shape.kv_heads * shape.head_dim), d),
            ((t, shape.kv_heads * shape.head_dim), d),
        )
        step.release(xn)
        (attn,) = step.get_simultaneous(((t, shape.heads * shape.head_dim), d))
        step.release(q, k, v)
        (o,) = step.get_simultaneous(hidden)  # o_proj
        step.release(attn)
        (h,) = step.get_simultaneous(hidden)  # x + o: the residual across the MLP
        step.release(x, o)
        (hn,) = step.get_simultaneous(hidden)  # post-attention RMSNorm
        gate, up = step.get_simultaneous(((t, shape.intermediate), d), ((t, shape.intermediate), d))
        step.release(hn)
        (act,) = step.get_simultaneous(((t, shape.intermediate), d))  # silu(gate) * up
        step.release(gate, up)
        (down,) = step.get_simultaneous(hidden)  # down_proj
        step.release(act)
        (x,) = step.get_simultaneous(hidden)  # h + down: the next layer's input
        step.release(h, down)


def forward_scopes(open_scope: Callable[[], Any], shape: DecoderShape, tokens: int) -> None:
    """The forward pass in nested scopes: a scope's views live until it exits, so what
    outlives a part of the layer is asked for before that part's scope opens."""
    t, d = tokens, shape.dtype
    hidden = ((t, shape.hidden), d)
    with open_scope() as forward:
        forward.get_simultaneous(hidden, hidden)  # the residual stream, ping-pong by layer
        for _ in range(shape.layers):
            with open_scope() as block:
                block.get_simultaneous(hidden)  # h, read by the MLP's residual add
                with open_scope() as attention:
                    attention.get_simultaneous(hidden)  # xn
                    attention.get_simultaneous(
                        ((t, shape.heads * shape.head_dim), d),
                        ((t, shape.kv_heads * shape.head_dim), d),
                        ((t, shape.kv_heads * shape.head_dim), d),
                    )
                    attention.get_simultaneous(((t, shape.heads * shape.head_dim), d))
                    attention.get_simultaneous(hidden)  # o
                with open_scope() as mlp:
                    mlp.get_simultaneous(hidden)  # hn
                    mlp.get_simultaneous(((t, shape.intermediate), d), ((t, shape.intermediate), d))
                    mlp.get_simultaneous(((t, shape.intermediate), d))
                    mlp.get_simultaneous(hidden)  # down; h + down goes to the residual


def plain_specs(shape: DecoderShape, tokens: int) -> list[Spec]:
    """Every view of the forward pass, in request order (what plain requests ask for
    together)."""
    dry = DryStep()
    forward_steps(dry, shape, tokens)
    return dry.specs


class DryStep:
    """Records what a step run would: per view its aligned bytes, first and last request."""

    def __init__(self, alignment: int = DEFAULT_ALIGNMENT) -> None:
        self.alignment = alignment
        self.specs: list[Spec] = []
        self.blocks: list[list[int]] = []  # [nbytes, first, last]
        self.live: set[int] = set()
        self.request = 0
        self.releases = 0

    def get_simultaneous(self, *specs: Spec) -> list[int]:
        layout = compute_layout(specs, self.alignment)
        ids = []
        for view in layout.views:
            ids.append(len(self.blocks))
            self.blocks.append([round_up(view.nbytes, self.alignment), self.request, -1])
        self.specs.extend(specs)
        self.live.update(ids)
        self.request += 1
        return ids

    def release(self, *views: Any) -> None:
        self.releases += 1
        for block in views:
            self.blocks[block][2] = self.request - 1
            self.live.discard(block)

    def finish(self) -> list[tuple[int, int, int]]:
        """The blocks, views still live ending at the last request."""
        for block in self.live:
            self.blocks[block][2] = max(self.request - 1, self.blocks[block][1])
        self.live.clear()
        return [(n, first, last) for n, first, last in self.blocks]


class _DryScope:
    """A scope of a dry run: requests stack at the top; the peak top is the capacity."""

    def __init__(self, stack: list[int], peak: list[int], alignment: int) -> None:
        self._stack, self._peak, self._alignment = stack, peak, alignment

    def __enter__(self) -> _DryScope:
        self._stack.append(self._stack[-1])
        return self

    def get_simultaneous(self, *specs: Spec) -> list[None]:
        self._stack[-1] += compute_layout(specs, self._alignment).total
        self._peak[0] = max(self._peak[0], self._stack[-1])
        return [None] * len(specs)

    def __exit__(self, *exc_info: object) -> None:
        self._stack.pop()


def dry_bytes(
    shape: DecoderShape, tokens: int, alignment: int = DEFAULT_ALIGNMENT
) -> dict[str, int]:
    """The four byte figures from layouts alone (no memory reserved)."""
    step = DryStep(alignment)
    forward_steps(step, shape, tokens)
    plan = plan_offsets(step.finish(), alignment=alignment)
    stack, peak = [0], [0]
    forward_scopes(lambda: _DryScope(stack, peak, alignment), shape, tokens)
    return {
        "plain": compute_layout(tuple(step.specs), alignment).total,
        "scopes": peak[0],
        "steps": plan.total_bytes,
        "load": plan.lower_bound,
    }


# ------------------------------------------------------------- the pass, with arithmetic
class LayerOps(Protocol):
    """A framework's arithmetic for :func:`layer_released` and :func:`layer_scoped`; each
    writes its result into ``out`` (scratch) and returns it."""

    def rmsnorm(self, x: Any, out: Any) -> Any:
        """``x`` over its root mean square."""
        ...

    def matmul(self, a: Any, b: Any, out: Any) -> Any:
        """``a @ b``."""
        ...

    def attention(self, qkv: Any, out: Any) -> Any:
        """Causal grouped-query attention of the packed ``qkv``."""
        ...

    def silu_mul(self, gate_up: Any, out: Any) -> Any:
        """``silu(gate) * up`` of the packed ``gate_up``."""
        ...

    def add_(self, x: Any, y: Any) -> Any:
        """``x += y``."""
        ...


def layer_released(
    ops: LayerOps,
    get: Callable[[tuple[int, int]], Any],
    release: Callable[..., None],
    x: Any,
    w: dict[str, Any],
    *,
    shape: DecoderShape,
    tokens: int,
) -> Any:
    """One decoder layer: ``get(shape)`` gives scratch, ``release(*views)`` ends its life
    after its last use (docs/planning.md's layer). Returns the layer's output (scratch)."""
    t, h_, i_ = tokens, shape.hidden, shape.intermediate
    xn = ops.rmsnorm(x, get((t, h_)))
    qkv = ops.matmul(xn, w["qkv"], get((t, (shape.heads + 2 * shape.kv_heads) * shape.head_dim)))
    release(xn)
    attn = ops.attention(qkv, get((t, shape.heads * shape.head_dim)))
    release(qkv)
    h = ops.matmul(attn, w["o"], get((t, h_)))
    release(attn)
    ops.add_(h, x)  # the residual, kept across the MLP
    release(x)
    hn = ops.rmsnorm(h, get((t, h_)))
    gate_up = ops.matmul(hn, w["gate_up"], get((t, 2 * i_)))
    release(hn)
    act = ops.silu_mul(gate_up, get((t, i_)))
    release(gate_up)
    out = ops.matmul(act, w["down"], get((t, h_)))
    release(act)
    ops.add_(out, h)
    release(h)
    return out


def layer_scoped(
    ops: LayerOps,
    open_scope: Callable[[], Any],
    x: Any,
    out: Any,
    w: dict[str, Any],
    *,
    shape: DecoderShape,
    tokens: int,
) -> Any:
    """The same layer in nested scopes (a scope's views live until it exits): ``h``, which
    the MLP reads, is asked for before the attention scope opens; the result goes to
    ``out`` (the other half of the residual stream's ping-pong)."""
    t, h_, i_ = tokens, shape.hidden, shape.intermediate
    with open_scope() as block:
        (h,) = block.get_simultaneous(((t, h_), shape.dtype))
        with open_scope() as part:
            get = part.get_simultaneous
            (xn,) = get(((t, h_), shape.dtype))
            ops.rmsnorm(x, xn)
            qkv_width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
            (qkv,) = get(((t, qkv_width), shape.dtype))
            ops.matmul(xn, w["qkv"], qkv)
            (attn,) = get(((t, shape.heads * shape.head_dim), shape.dtype))
            ops.attention(qkv, attn)
            ops.matmul(attn, w["o"], h)
            ops.add_(h, x)
        with open_scope() as part:
            get = part.get_simultaneous
            (hn,) = get(((t, h_), shape.dtype))
            ops.rmsnorm(h, hn)
            (gate_up,) = get(((t, 2 * i_), shape.dtype))
            ops.matmul(hn, w["gate_up"], gate_up)
            (act,) = get(((t, i_), shape.dtype))
            ops.silu_mul(gate_up, act)
            ops.matmul(act, w["down"], out)
            ops.add_(out, h)
    return out
