"""Plan MiniMalloc's 11 "challenging" instances with and without a time limit.

The instances are not part of this repository: they are google/minimalloc's
``benchmarks/challenging/*.csv`` (Apache-2.0; Moffitt, "MiniMalloc", ASPLOS 2023), each
``id,lower,upper,size`` with half-open lifetimes and a best known total of 1,048,576 bytes.

    python scripts/bench-challenging.py DIR [--time-limit 10] [--nodes] [--at-best-known]

Prints which search runs (the compiled one, arena/planning/_search.c, or the Python one:
set ARENA_PURE_PYTHON=1 for it), then per instance: blocks, bytes without a limit, bytes
with the limit, the ratio to 1,048,576 and to LOAD, whether the plan is proven optimal,
and the wall seconds and CPU seconds of the planning with the limit (CPU over wall is the
share of a core the process got). ``--nodes`` runs the search once more from the plan
without a limit (``search.improve``, what ``plan_offsets`` runs) and prints the nodes it
visited. ``--at-best-known`` instead decides capacity 1,048,576 alone, as MiniMalloc's
solver does (its round robin: each preorder in turn under a node limit that doubles from
twice the blocks), and prints whether a plan was found, the nodes and the seconds.
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import time

from arena import plan_offsets
from arena.planning import search

BEST_KNOWN = 1_048_576
ALIGNMENT = 1024  # every size in the set is a multiple of it


def _at_best_known(blocks: list[tuple[int, int, int]], time_limit: float) -> str:
    """MiniMalloc's own run: capacity 1,048,576, round robin over its three preorders."""
    units = [b[0] // ALIGNMENT for b in blocks]
    first, last = [b[1] for b in blocks], [b[2] for b in blocks]
    start, cpu = time.perf_counter(), time.process_time()
    deadline = start + time_limit
    limit, nodes, outcome = len(blocks), 0, "time limit"
    while outcome == "time limit" and time.perf_counter() < deadline:
        limit *= 2
        for heuristic in ("WAT", "TAW", "TWA"):
            status, _, used = search.decide(
                units,
                first,
                last,
                BEST_KNOWN // ALIGNMENT,
                heuristic=heuristic,
                node_limit=limit,
                time_limit=deadline - time.perf_counter(),
            )
            nodes += used
            if status != 2:  # not the node limit: found, none, or the clock
                outcome = {0: f"found ({heuristic})", 1: "none exists"}.get(status, outcome)
                break
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return f"{outcome} nodes {nodes} {seconds:.2f} {cpu:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--nodes", action="store_true", help="also count the search's nodes")
    parser.add_argument(
        "--at-best-known", action="store_true", help="decide 1,048,576 alone, as MiniMalloc"
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"search: {search.SEARCH_PATH} {search.WHY_PYTHON}".rstrip())
    if args.at_best_known:
        print("name blocks outcome nodes seconds cpu")
    else:
        extra = " nodes" if args.nodes else ""
        print(
            "name blocks plain_bytes limited_bytes /best /LOAD optimal limit_reached "
            f"seconds cpu{extra}"
        )
    for path in sorted(args.dir.glob("*.csv")):
        with path.open() as f:
            rows = list(csv.DictReader(f))
        name = path.stem.split(".")[0]
        blocks = [(int(r["size"]), int(r["lower"]), int(r["upper"]) - 1) for r in rows]
        if args.at_best_known:
            print(f"{name} {len(blocks)} {_at_best_known(blocks, args.time_limit)}", flush=True)
            continue
        plain = plan_offsets(blocks, alignment=ALIGNMENT)
        start, cpu = time.perf_counter(), time.process_time()
        plan = plan_offsets(blocks, alignment=ALIGNMENT, time_limit=args.time_limit)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        nodes = ""
        if args.nodes:
            out = search.improve(
                [b[0] // ALIGNMENT for b in blocks],
                [b[1] for b in blocks],
                [b[2] for b in blocks],
                [o // ALIGNMENT for o in plain.offsets],
                lower=plain.lower_bound // ALIGNMENT,
                time_limit=args.time_limit,
            )
            nodes = f" {out.nodes} ({out.total * ALIGNMENT})"
        print(
            f"{name} {len(blocks)} {plain.total_bytes} {plan.total_bytes} "
            f"{plan.total_bytes / BEST_KNOWN:.4f} {plan.ratio:.4f} {plan.optimal} "
            f"{plan.limit_reached} {seconds:.2f} {cpu:.2f}{nodes}",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
