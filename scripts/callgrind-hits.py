#!/usr/bin/env python
"""Per-call instruction and cache-miss counts of the compiled hits, from callgrind.

Wall-clock figures on a shared machine move by tens of percent; callgrind's counts do
not. This runs the requests to count inside ``functools.reduce`` calls, after a warm-up
(record, plan, replay, lock), so that callgrind collects only them::

    valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \\
        --toggle-collect=functools_reduce --callgrind-out-file=OUT \\
        python scripts/callgrind-hits.py run torch no_grad pass 20
    python scripts/callgrind-hits.py report OUT torch pass 20

``micro`` counts BATCH requests back to back per block (plain, step, step with a release
per request, scope: regionbench's blocks); ``rounds`` the plain, step (no release) and
scope blocks one after the other per round, as regionbench alternates them, with the
step-with-releases block run between rounds but not counted (so a step request is counted
apart from the released step's); ``pass`` the bench's 4-layer decoder pass
(arena/tools/passbench.py: the floor, the step pass and the scoped pass), where torch
kernels run between the requests. ``report`` divides each hit function's inclusive
counts (Ir, D1mr, I1mr...), read from the file, by the calls made while collecting
(callgrind's own call counts include the warm-up's).

``parts`` runs the passes of :data:`PARTS` (the floor, the views pass, the steps,
the scopes, ``torch.empty``, then the steps and scopes on a cached front,
``ws.front(framework, cached=True)``), each in its own ``functools.reduce``; with callgrind's
``--dump-before=functools_reduce`` each lands in its own file (OUT.2 to OUT.7, then OUT),
and ``report OUT FRAMEWORK parts REPS`` prints each pass's totals per pass and over the
floor's: what the fresh views alone cost against what a step's or a scope's own work
adds.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable
from typing import Any

BATCH = 128

#: The passes ``parts`` times, in order (one callgrind dump each).
PARTS = ("floor", "views", "steps", "scopes", "empty", "cached_steps", "cached_scopes")


def _counts(framework: str, kind: str, reps: int) -> dict[str, int]:
    """Calls per hit function while collecting."""
    if kind == "rounds":
        return {
            "get_simultaneous": BATCH * reps,
            "step_get_simultaneous": BATCH * reps,
            "scope_get_simultaneous": BATCH * reps,
        }
    if kind == "micro":
        return {
            "get_simultaneous": BATCH * reps,
            "step_get_simultaneous": 2 * BATCH * reps,
            "step_release": BATCH * reps,
            "scope_get_simultaneous": BATCH * reps,
        }
    from arena.core import Arena
    from arena.tools import passbench
    from arena.tools.decoder import DOCS_LAYERS

    seen = {"step_get_simultaneous": 0, "step_release": 0, "scope_get_simultaneous": 0}

    class Counted:
        """A step or scope whose requests and releases are counted."""

        def __init__(self, region: Any) -> None:
            self.region = region

        def __enter__(self) -> Counted:
            self.inner = self.region.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self.region.__exit__(*exc)

        def get_simultaneous(self, *specs: Any) -> Any:
            name = "step" if hasattr(self.inner, "release") else "scope"
            seen[f"{name}_get_simultaneous"] += 1
            return self.inner.get_simultaneous(*specs)

        def release(self, *views: Any) -> Any:
            seen["step_release"] += 1
            return self.inner.release(*views)

    class Front:
        def __init__(self, front: Any) -> None:
            self.front = front

        def step(self, key: Any) -> Counted:
            return Counted(self.front.step(key))

        def scope(self) -> Counted:
            return Counted(self.front.scope())

    with Arena("cpu", framework=framework) as ws:
        passes = passbench.make_passes(
            framework, Front(ws.front(framework)), DOCS_LAYERS, passbench.TOKENS
        )
        passes["steps"]()
        passes["scopes"]()
    return {name: count * reps for name, count in seen.items()}


def run(framework: str, mode: str, kind: str, reps: int) -> None:
    """Warm up, then run each block ``reps`` times inside ``functools.reduce``."""
    from arena.core import Arena
    from arena.tools import passbench
    from arena.tools.decoder import DOCS_LAYERS

    dtype: Any = "float32"
    enter: Callable[[], Any] = contextlib.nullcontext
    if framework == "torch":
        import torch

        torch.set_num_threads(1)
        dtype = torch.float32
        enter = {
            "grad": contextlib.nullcontext,
            "no_grad": torch.no_grad,
            "inference": torch.inference_mode,
        }[mode]
    spec = ((4, 16), dtype)
    with Arena("cpu", framework=framework) as ws, enter():
        front = ws.front(framework)
        plain = front.get_simultaneous

        def stepped(release: bool) -> None:
            with front.step("released" if release else "batch") as st:
                get, free = st.get_simultaneous, st.release
                for _ in range(BATCH):
                    (view,) = get(spec)
                    if release:
                        free(view)

        def scoped() -> None:
            with front.scope() as s:
                get = s.get_simultaneous
                for _ in range(BATCH):
                    get(spec)

        def plains() -> None:
            for _ in range(BATCH):
                plain(spec)

        blocks = [plains, lambda: stepped(False), lambda: stepped(True), scoped]
        passes = passbench.make_passes(framework, front, DOCS_LAYERS, passbench.TOKENS)
        cached = ws.front(framework, cached=True)
        on_cached = passbench.make_passes(framework, cached, DOCS_LAYERS, passbench.TOKENS)
        passes["cached_steps"], passes["cached_scopes"] = on_cached["steps"], on_cached["scopes"]
        for index in range(5):  # record, plan, replay (and remember); then locked
            if index == 3:
                ws.lock()
            for block in blocks:
                block()
            for one in passes.values():
                one()
        if kind == "rounds":
            rounds = [plains, lambda: stepped(False), scoped]
            for _ in range(reps):
                functools.reduce(lambda _, block: block(), rounds, None)
                stepped(True)  # between rounds, as in regionbench; not collected
            return
        names = PARTS if kind == "parts" else ("floor", "steps", "scopes")
        timed = blocks if kind == "micro" else [passes[n] for n in names]
        for block in timed:
            functools.reduce(lambda _, __, block=block: block(), range(reps), None)


def _inclusive(path: str, names: set[str]) -> tuple[list[str], dict[str, list[int]]]:
    """The events and each function's inclusive counts, read from callgrind's file: every
    cost line of the function's blocks (its own lines, and after each ``calls=`` line the
    callee's inclusive cost). callgrind_annotate's inclusive sums change with Perl's hash
    order when a function is seen under two contexts; these do not."""
    events: list[str] = []
    skip = 1  # position columns before the counts: "line", or "instr line" (--dump-instr)
    table: dict[str, str] = {}
    current = ""
    totals: dict[str, list[int]] = {}
    with open(path) as lines:
        for line in lines:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("positions:"):
                skip = len(line.split()) - 1
            elif line.startswith(("fn=", "cfn=")):
                spec = line.split("=", 1)[1].strip()
                found = re.match(r"\((\d+)\)(?: (.*))?", spec)
                if found is None:
                    name = spec
                else:
                    if found.group(2):
                        table[found.group(1)] = found.group(2)
                    name = table.get(found.group(1), "?")
                if line.startswith("fn="):
                    current = name.split("'")[0]
            elif (line[:1].isdigit() or line[:1] in "+-*") and current in names:
                counts = totals.setdefault(current, [0] * len(events))
                for index, value in enumerate(line.split()[skip:]):
                    counts[index] += int(value)
    return events, totals


def _summary(path: str) -> tuple[list[str], list[int]]:
    """The events and the totals of one callgrind file."""
    events: list[str] = []
    with open(path) as lines:
        for line in lines:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                return events, [int(v) for v in line.split()[1:]]
    return events, []


def report_parts(path: str, reps: int) -> None:
    """Each pass's totals per pass, and over the floor's (``parts``)."""
    floor: list[int] = []
    for index, name in enumerate(PARTS):
        events, totals = _summary(path if index == len(PARTS) - 1 else f"{path}.{index + 2}")
        floor = floor or totals
        cells = " ".join(
            f"{e}={v / reps:.0f} ({v / max(f, 1):.3f})"
            for e, v, f in zip(events, totals, floor, strict=False)
        )
        print(f"{name:8} {cells}")


def report(path: str, framework: str, kind: str, reps: int) -> None:
    """Each hit function's inclusive counts per call."""
    if kind == "parts":
        report_parts(path, reps)
        return
    calls = _counts(framework, kind, reps)
    events, totals = _inclusive(path, set(calls))
    for name, counts in sorted(totals.items()):
        n = calls[name]
        cells = " ".join(f"{e}={v / n:.1f}" for e, v in zip(events, counts, strict=True))
        print(f"{name:24} calls={n} {cells}")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "run":
        run(args[0], args[1], args[2], int(args[3]))
    else:
        report(args[0], args[1], args[2], int(args[3]))
