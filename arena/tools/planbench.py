"""The planning bench: chained decoder layers as plain requests, scopes and steps.

``python -m arena.tools.planbench [--quick] [--json PATH]`` runs four chained decoder
layers of a Llama-3-8B-sized model (hidden 4096, intermediate 14336, 32 query heads and
8 KV heads of 128, bfloat16) over host memory and reports, per token count:

* **plain**: every intermediate of the forward pass in one ``get_simultaneous`` (vLLM's
  semantics: views live until the next request, so whatever must live together is asked
  for together): the sum of their bytes;
* **scopes**: a forward scope holding the residual stream (two buffers, one per parity of
  the layer), a scope per layer holding the residual after attention, and in it an
  attention scope and then an MLP scope;
* **steps**: one step per forward pass, every view released after its last use, planned
  by :func:`~arena.planning.plan_offsets` (the slot's capacity once planned);
* **LOAD**: the most bytes live at once, the bound no placement can go below.

Byte figures are the arena's capacities (``growth="exact"``); the views are never written,
so a 4096-token run reserves gigabytes of address space but touches none of it. Where the
host refuses an allocation, the figures come from a dry run of the same program (layouts,
the scope stack and ``plan_offsets`` over the recorded blocks) and the row says so; every
row carries the dry run too, as a check.

Timing: on one locked arena, a replayed step against the same requests made as plain
locked requests, in paired rounds (the order alternates by round), each ratio the median
over rounds with its 10th and 90th percentiles: a request timed alone inside the step
against the plain one (the target: at most 1.2), and the whole step (enter, requests,
releases, exit) per request. The layers are :mod:`arena.tools.decoder`'s.

``--offsets`` times :func:`~arena.planning.plan_offsets` without a limit instead, on the
random sets docs/planning.md quotes (:func:`random_blocks`: 10**4 and 10**5
blocks, each living up to 10 steps or up to a tenth of the program), in CPU seconds, with
the plan's ratio to LOAD, the order that won, which placement ran (compiled or Python)
and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena.base.events import MB
from arena.core import Arena
from arena.planning import offsets, plan_offsets
from arena.tools.decoder import (
    LLAMA_8B,
    DecoderShape,
    DryStep,
    Spec,
    dry_bytes,
    forward_scopes,
    forward_steps,
    plain_specs,
)

__all__ = [
    "OFFSET_SETS",
    "format_offsets",
    "format_planning",
    "main",
    "measure_bytes",
    "random_blocks",
    "run_planning_bench",
    "time_offsets",
    "time_replay",
]

#: The step-time target: a request inside a replayed step against a plain locked request.
TARGET_RATIO = 1.2


# ---------------------------------------------------------------------- measured
def _arena(max_bytes: int | None = None) -> Arena:
    return Arena(
        "cpu", framework="numpy", growth="exact", poison=False, debug=False, max_bytes=max_bytes
    )


def measure_bytes(
    shape: DecoderShape, tokens: int, *, max_bytes: int | None = None
) -> dict[str, Any]:
    """The byte figures of one token count, from the arena's capacities: plain, scopes,
    steps (and the size its recording run reached), LOAD; ``dry`` holds the dry run's.

    Where the host refuses the memory (or an arena would pass ``max_bytes``), the figures
    are the dry run's and ``measured`` is False.
    """
    dry = dry_bytes(shape, tokens)
    row: dict[str, Any] = {"tokens": tokens, "measured": True, "dry": dry}
    try:
        with _arena(max_bytes) as ws:
            ws.get_simultaneous(*plain_specs(shape, tokens))
            row["plain"] = ws.stats().slots[0].capacity
        with _arena(max_bytes) as ws:
            forward_scopes(ws.scope, shape, tokens)
            row["scopes"] = ws.stats().slots[0].capacity
        with _arena(max_bytes) as ws:
            with ws.step("forward") as st:  # records: first fit over the bytes free
                forward_steps(st, shape, tokens)
            row["steps_recording"] = ws.stats().slots[0].capacity
            with ws.step("forward") as st:  # planned: the slot is sized to the plan
                forward_steps(st, shape, tokens)
            ws.lock()
            slot = ws.stats().slots[0]
            row["steps"], row["load"] = slot.capacity, slot.load
    except MemoryError as exc:  # ArenaOutOfMemoryError included
        row.update(dry, measured=False, steps_recording=None, note=f"dry run: {exc}")
    return row


# ---------------------------------------------------------------------- timing
def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class _Clock:
    """Forwards requests and releases to ``target``, timing each request alone."""

    __slots__ = ("spent", "target")

    def __init__(self, target: Any) -> None:
        self.target = target
        self.spent = 0.0

    def get_simultaneous(self, *specs: Spec) -> list[Any]:
        start = time.perf_counter()
        views = self.target.get_simultaneous(*specs)
        self.spent += time.perf_counter() - start
        return views  # type: ignore[no-any-return]

    def release(self, *views: Any) -> None:
        self.target.release(*views)


class _Nothing:
    def get_simultaneous(self, *specs: Spec) -> list[Any]:
        return []


def _clock_overhead(calls: int) -> float:
    """Seconds the clock itself adds to one timed request."""
    clock = _Clock(_Nothing())
    for _ in range(calls):
        clock.get_simultaneous()
    return clock.spent / calls


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p10": _percentile(values, 0.1),
        "p90": _percentile(values, 0.9),
    }


def time_replay(shape: DecoderShape, tokens: int, rounds: int, inner: int) -> dict[str, Any]:
    """Paired rounds on one locked arena: ``inner`` replayed steps against the same
    requests made ``inner`` times as plain locked requests (the order alternates by round).

    Two ratios per round: each request timed alone (the same clock on both sides, its own
    cost subtracted), and the whole step (enter, requests, releases, exit) per request
    against the plain requests, untimed inside.
    """
    groups, releases = _requests(shape, tokens)
    with _arena() as ws:
        for _ in range(2):  # record, then plan
            with ws.step("forward") as st:
                forward_steps(st, shape, tokens)
        for group in groups:
            ws.get_simultaneous(*group)
            ws.get_simultaneous(*group)  # remembered from the second sighting
        ws.lock()
        before = ws.stats().allocations
        get = ws.get_simultaneous

        def stepped(clock: _Clock | None) -> float:
            start = time.perf_counter()
            for _ in range(inner):
                with ws.step("forward") as st:
                    if clock is None:
                        forward_steps(st, shape, tokens)
                    else:
                        clock.target = st
                        forward_steps(clock, shape, tokens)
            return time.perf_counter() - start

        def plain(clock: _Clock | None) -> float:
            start = time.perf_counter()
            for _ in range(inner):
                if clock is None:
                    for group in groups:
                        get(*group)
                else:
                    for group in groups:
                        clock.get_simultaneous(*group)
            return time.perf_counter() - start

        calls = inner * len(groups)

        def requests(run: Callable[[_Clock], float]) -> float:
            """Seconds per request, less the clock's own cost in this round."""
            clock = _Clock(ws)
            run(clock)
            return clock.spent / calls - overheads[-1]

        stepped(None), plain(None)  # warm both paths
        step_us: list[float] = []
        plain_us: list[float] = []
        ratios: list[float] = []
        whole: list[float] = []
        overheads: list[float] = []
        for index in range(rounds):
            # The least of three: an interruption only ever adds to the clock's cost.
            overheads.append(min(_clock_overhead(calls) for _ in range(3)))
            if index % 2 == 0:
                a, b = requests(stepped), requests(plain)
                c, d = stepped(None), plain(None)
            else:
                b, a = requests(plain), requests(stepped)
                d, c = plain(None), stepped(None)
            step_us.append(a * 1e6)
            plain_us.append(b * 1e6)
            ratios.append(a / b)
            whole.append(c / d)
        allocations = ws.stats().allocations - before
    return {
        "tokens": tokens,
        "requests_per_step": len(groups),
        "releases_per_step": releases,
        "rounds": rounds,
        "steps_per_round": inner,
        "clock_overhead_us": statistics.median(overheads) * 1e6,
        "step_request_us": statistics.median(step_us),
        "plain_request_us": statistics.median(plain_us),
        "request_ratio": _stats(ratios),
        "whole_step_ratio": _stats(whole),
        "target": TARGET_RATIO,
        "allocations_after_lock": allocations,
    }


def _requests(shape: DecoderShape, tokens: int) -> tuple[list[tuple[Spec, ...]], int]:
    """The step program's requests, grouped as it makes them, and its release calls."""
    groups: list[tuple[Spec, ...]] = []

    class Grouping(DryStep):
        def get_simultaneous(self, *specs: Spec) -> list[int]:
            groups.append(specs)
            return super().get_simultaneous(*specs)

    dry = Grouping()
    forward_steps(dry, shape, tokens)
    return groups, dry.releases


# ---------------------------------------------------------------------- plan_offsets
#: The random sets timed by ``--offsets``: (blocks, longest extra life in steps).
OFFSET_SETS = ((10**4, 10), (10**4, 10**3), (10**5, 10), (10**5, 10**4))


def random_blocks(n: int, span: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """``n`` random blocks ``(nbytes, first, last)``: sizes uniform from 1 byte to 1 MiB,
    first use uniform over ``n`` steps, living 1 to ``span + 1`` steps (``span = n // 10``:
    about ``n / 10`` blocks live with each, the issue's long-lived sets)."""
    rng = random.Random(seed)
    blocks = []
    for _ in range(n):
        first = rng.randrange(n)
        blocks.append((rng.randint(1, 1 << 20), first, first + rng.randint(0, span)))
    return blocks


def time_offsets(sets: tuple[tuple[int, int], ...] = OFFSET_SETS) -> dict[str, Any]:
    """``plan_offsets`` without a limit on each ``random_blocks(n, span)``: CPU seconds,
    the ratio to LOAD and the order that won; JSON-ready."""
    rows = []
    for n, span in sets:
        blocks = random_blocks(n, span)
        cpu = time.process_time()
        plan = plan_offsets(blocks)
        cpu = time.process_time() - cpu
        rows.append(
            {
                "blocks": n,
                "span": span,
                "cpu_s": cpu,
                "ratio": plan.ratio,
                "strategy": plan.strategy,
                "total_bytes": plan.total_bytes,
            }
        )
    return {"placement": offsets.PLACE_PATH, "load": os.getloadavg(), "rows": rows}


def format_offsets(result: dict[str, Any]) -> str:
    """The ``--offsets`` result as a table for people."""
    load = ", ".join(f"{v:.1f}" for v in result["load"])
    lines = [
        f"plan_offsets without a limit ({result['placement']} placement, load average "
        f"{load} after)",
        f"{'blocks':>8}{'lives up to':>13}{'CPU s':>9}{'ratio':>8}  order",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['blocks']:>8}{row['span'] + 1:>13}{row['cpu_s']:>9.2f}"
            f"{row['ratio']:>8.4f}  {row['strategy']}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- the bench
def run_planning_bench(quick: bool) -> dict[str, Any]:
    """Byte figures per token count and the step-replay timing, JSON-ready."""
    shape = LLAMA_8B
    counts = (1, 16, 256, 4096)
    rows = [measure_bytes(shape, tokens) for tokens in counts]
    rounds, inner = (15, 10) if quick else (101, 40)
    timing = time_replay(shape, 16, rounds, inner)
    return {"shape": shape.describe(), "quick": quick, "bytes": rows, "timing": timing}


def format_planning(result: dict[str, Any]) -> str:
    """The result as tables for people."""
    lines = [
        f"planning bench: {result['shape']} (host memory, growth 'exact')",
        "",
        f"{'tokens':>7}{'plain MB':>11}{'scopes MB':>11}{'steps MB':>10}{'LOAD MB':>10}"
        f"{'plain/LOAD':>12}{'scopes/LOAD':>13}{'steps/LOAD':>12}",
    ]
    for row in result["bytes"]:
        load = row["load"]
        lines.append(
            f"{row['tokens']:>7}{row['plain'] / MB:>11.2f}{row['scopes'] / MB:>11.2f}"
            f"{row['steps'] / MB:>10.2f}{load / MB:>10.2f}{row['plain'] / load:>12.2f}"
            f"{row['scopes'] / load:>13.2f}{row['steps'] / load:>12.2f}"
            + ("" if row["measured"] else "  (dry run: the host refused the memory)")
        )
    lines += [
        "  plain: the whole forward pass in one request (the sum of its intermediates);",
        "  scopes: forward > layer > attention | MLP scopes; steps: one step per forward",
        "  pass, planned (its first, recording run reached "
        + ", ".join(
            f"{row['steps_recording'] / MB:.2f}"
            for row in result["bytes"]
            if row.get("steps_recording")
        )
        + " MB); LOAD: the most bytes live at once",
    ]
    t = result["timing"]
    req, whole = t["request_ratio"], t["whole_step_ratio"]
    lines += [
        "",
        f"replayed step against plain locked requests ({t['tokens']} tokens, "
        f"{t['requests_per_step']} requests and {t['releases_per_step']} release calls a "
        f"step, {t['rounds']} paired rounds of {t['steps_per_round']} steps, NumPy views):",
        f"  a request: step {t['step_request_us']:.2f} us, plain {t['plain_request_us']:.2f} "
        f"us (each timed alone, the clock's {t['clock_overhead_us']:.2f} us subtracted: "
        f"indicative only, a sub-microsecond call timed alone; the bench's target is the "
        f"batched figure of its steps and scopes table); ratio {req['median']:.2f} "
        f"(p10 {req['p10']:.2f}, p90 {req['p90']:.2f})",
        f"  the whole step (enter, requests, releases, exit) per request: ratio "
        f"{whole['median']:.2f} (p10 {whole['p10']:.2f}, p90 {whole['p90']:.2f})",
        f"  allocations after lock: {t['allocations_after_lock']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena.tools.planbench``."""
    parser = argparse.ArgumentParser(
        prog="python -m arena.tools.planbench",
        description="Bytes of four chained decoder layers as plain requests, scopes and "
        "steps against LOAD, and the time of a request inside a replayed step against a "
        "plain locked request.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer timing rounds (default: full runs)"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON (default: no JSON)"
    )
    parser.add_argument(
        "--offsets",
        action="store_true",
        help="time plan_offsets without a limit on random sets of 10^4 and 10^5 blocks "
        "instead (default: the decoder layers)",
    )
    args = parser.parse_args(argv)
    if args.offsets:
        result = time_offsets()
        print(format_offsets(result))
    else:
        result = run_planning_bench(args.quick)
        print(format_planning(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
