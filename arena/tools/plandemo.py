"""The demo's planning section (``python -m arena demo`` prints it last): chained decoder
layers as plain requests, every intermediate at once, against one step per forward pass,
planned by lifetime; then locked replays at random token counts."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from arena.base.events import MB
from arena.core import Arena
from arena.tools.decoder import DecoderShape, forward_steps, plain_specs

__all__ = ["DEMO_LAYERS", "PlanningDemo", "format_planning_demo", "run_planning_demo"]

#: The demo's sizes (hidden 1024, 16 heads of 64), a Llama-like MLP ratio, float16.
DEMO_LAYERS = DecoderShape(
    hidden=1024, intermediate=3584, heads=16, kv_heads=4, head_dim=64, layers=4, dtype="float16"
)


@dataclass
class PlanningDemo:
    """Chained decoder layers as plain requests and as a step: bytes and the checks."""

    shape: str
    tokens: int
    plain_bytes: int
    step_bytes: int
    load_bytes: int
    replays: int
    allocations_after_lock: int
    pointer_changes: int

    @property
    def ok(self) -> bool:
        """Whether the plan saved memory and the locked replays allocated nothing."""
        return (
            self.step_bytes < self.plain_bytes
            and self.allocations_after_lock == 0
            and self.pointer_changes == 0
        )


def run_planning_demo(
    device: Any = None, framework: str | None = None, max_tokens: int = 512, seed: int = 0
) -> PlanningDemo:
    """Four decoder layers at ``max_tokens``: every intermediate in one plain request (all
    at once, as vLLM's semantics ask for views that must live together), against one step
    per forward pass (views released after their last use, planned by lifetime); then
    locked replays at random token counts up to ``max_tokens`` (smaller views fit the plan:
    the same pointers, no allocation)."""
    shape = DEMO_LAYERS
    with Arena(device, framework=framework, profile=False) as ws:
        ws.get_simultaneous(*plain_specs(shape, max_tokens))
        plain = ws.stats().slots[0].capacity
    with Arena(device, framework=framework, profile=False) as ws:
        for _ in range(2):  # the first run records, the second plans
            with ws.step("forward") as step:
                forward_steps(step, shape, max_tokens)
        ws.lock()
        at_lock = ws.stats()
        watch = _Pointers(ws.front(ws.framework))
        replays = 20
        for tokens in random.Random(seed).choices(range(1, max_tokens + 1), k=replays):
            with ws.step("forward") as step:
                watch.step = step
                forward_steps(watch, shape, tokens)
                watch.request = 0
        after = ws.stats()
    return PlanningDemo(
        shape=shape.describe(),
        tokens=max_tokens,
        plain_bytes=plain,
        step_bytes=at_lock.slots[0].capacity,
        load_bytes=at_lock.slots[0].load,
        replays=replays,
        allocations_after_lock=after.allocations - at_lock.allocations,
        pointer_changes=sum(len(p) - 1 for p in watch.pointers.values()),
    )


class _Pointers:
    """Passes a step's requests and releases on, noting every view's pointer by its
    place in the step (request index, view index)."""

    def __init__(self, front: Any) -> None:
        self.front = front
        self.step: Any = None
        self.request = 0
        self.pointers: dict[tuple[int, int], set[int]] = {}

    def get_simultaneous(self, *specs: Any) -> list[Any]:
        views: list[Any] = self.step.get_simultaneous(*specs)
        for index, view in enumerate(views):
            place = (self.request, index)
            self.pointers.setdefault(place, set()).add(self.front.data_ptr(view))
        self.request += 1
        return views

    def release(self, *views: Any) -> None:
        self.step.release(*views)


def format_planning_demo(report: PlanningDemo) -> str:
    """The planning section of the demo's output."""
    saved = report.plain_bytes - report.step_bytes
    return "\n".join(
        [
            f"planning by lifetime: {report.shape}, {report.tokens} tokens",
            f"{'plain requests, every intermediate at once (MB)':<52}"
            f"{report.plain_bytes / MB:>10.2f}",
            f"{'one step per forward pass, planned (MB)':<52}{report.step_bytes / MB:>10.2f}",
            f"{'LOAD: the most bytes live at once (MB)':<52}{report.load_bytes / MB:>10.2f}",
            f"{'saved by the plan (MB)':<52}{saved / MB:>10.2f} ({saved / report.plain_bytes:.0%})",
            f"{'allocations in ' + str(report.replays) + ' locked replays (must be 0)':<52}"
            f"{report.allocations_after_lock:>10}",
            f"{'pointer changes across those replays':<52}{report.pointer_changes:>10}",
            "OK: the plan saves memory and its replays allocate nothing"
            if report.ok
            else "FAILED: see above",
        ]
    )
