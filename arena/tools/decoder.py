"""Chained decoder layers as a program of requests, shared by the planning bench
(:mod:`arena.tools.planbench`) and the demo.

The same forward pass is written twice, as a user writes it: once for a step
(:func:`forward_steps`: every view released after its last use) and once for nested
scopes (:func:`forward_scopes`: what outlives a part of the layer is asked for before that
part's scope opens). :func:`plain_specs` lists every view (what plain requests ask for
together) and :func:`dry_bytes` gives the byte figures of all three from layouts alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from arena.base.layout import DEFAULT_ALIGNMENT, compute_layout, round_up
from arena.planning.offsets import plan_offsets

__all__ = [
    "LLAMA_8B",
    "DecoderShape",
    "DryStep",
    "Requester",
    "Spec",
    "dry_bytes",
    "forward_scopes",
    "forward_steps",
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
