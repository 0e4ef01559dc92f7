"""Recording requests of two source trees, paired in one process (issue 26, leftovers 3).

A step's recording run places each request in the lowest gap, books its blocks and
accounts what the step and the slot's region stack hold. This script loads two copies of
the package (each a folder holding ``arena/`` with its extensions built in place, e.g.
``python setup.py build_ext --inplace``, and ``adapters/``), each under the name
``arena`` in turn (sys.modules swapped between them), and times the same recording
workload on each, alternating which goes first: per round 20 recording runs (new keys)
of 400 requests (one or two views of 64 to 400 floats, the oldest view released once 64
are live), each step inside a scope, 8,000 requests a round. The figure is the median of
the per-round ratios ``second / first`` with its 10th-90th percentile spread
(:func:`arena.tools.timing.ratios`).

Usage::

    python scripts/bench-recording.py FIRST_TREE SECOND_TREE [ROUNDS]
    python scripts/bench-recording.py count TREE N
        # N recording requests of one tree, for callgrind: run it with N=2000 and N=10000
        # and divide the difference by 8000
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import time
from types import ModuleType
from typing import Any

F32 = "float32"
RUNS, REQUESTS, LIVE = 20, 400, 64


def _ours(name: str) -> bool:
    return name == "arena" or name.startswith("arena.")


def load(tree: str) -> dict[str, ModuleType]:
    """The package of ``tree`` imported under ``arena`` (its modules, to swap in)."""
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    link = os.path.join(tree, "arena", "adapters")
    if not os.path.exists(link):
        os.symlink(os.path.join("..", "adapters"), link)
    sys.path.insert(0, tree)
    try:
        package = importlib.import_module("arena")
        importlib.import_module("arena.adapters.numpy")
    finally:
        sys.path.remove(tree)
    assert package.__file__ is not None and package.__file__.startswith(tree), package.__file__
    return {n: m for n, m in sys.modules.items() if _ours(n)}


def use(modules: dict[str, ModuleType]) -> Any:
    """Make ``modules`` the ones ``import arena`` finds (lazy imports inside included)."""
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.modules.update(modules)
    return modules["arena"]


def workload(arena: Any, requests: int) -> float:
    """Seconds for ``requests`` recording requests on a fresh arena."""
    ws = arena.Arena("cpu", framework="numpy")
    key = 0
    start = time.perf_counter()
    done = 0
    while done < requests:
        key += 1
        with ws.scope(), ws.step(("recording", key)) as step:
            live: list[Any] = []
            for i in range(min(REQUESTS, requests - done)):
                if i % 3:
                    (view,) = step.get_simultaneous(((64 + (i % 7) * 16,), F32))
                    live.append(view)
                else:
                    live.extend(step.get_simultaneous(((64,), F32), ((400 - i % 5 * 8,), F32)))
                if len(live) > LIVE:
                    step.release(live.pop(0))
            done += min(REQUESTS, requests - done)
    seconds = time.perf_counter() - start
    ws.close()
    return seconds


def main(argv: list[str]) -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in type(f).__name__]
    if argv[0] == "count":
        arena = use(load(os.path.abspath(argv[1])))
        workload(arena, int(argv[2]))
        return
    first, second = (load(os.path.abspath(tree)) for tree in argv[:2])
    rounds = int(argv[2]) if len(argv) > 2 else 21
    requests = RUNS * REQUESTS
    for modules in (first, second):  # warm: memos and first imports
        workload(use(modules), requests // 4)
    times: tuple[list[float], list[float]] = ([], [])
    gc.disable()
    try:
        for r in range(rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for which in order:
                times[which].append(workload(use((first, second)[which]), requests))
                gc.collect()
    finally:
        gc.enable()
    arena = use(first)
    from arena.tools.timing import ratios

    paired = ratios(times[1], times[0])
    print(
        f"{requests} recording requests a round, {rounds} rounds: first {paired.bottom_us:.3f} s, "
        f"second {paired.top_us:.3f} s (medians); second / first {paired.median:.3f} "
        f"(p10 {paired.p10:.3f}, p90 {paired.p90:.3f})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
