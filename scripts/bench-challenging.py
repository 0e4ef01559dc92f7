"""Plan MiniMalloc's 11 "challenging" instances with and without a time limit.

The instances are not part of this repository: they are google/minimalloc's
``benchmarks/challenging/*.csv`` (Apache-2.0; Moffitt, "MiniMalloc", ASPLOS 2023), each
``id,lower,upper,size`` with half-open lifetimes and a best known total of 1,048,576 bytes.

    python scripts/bench-challenging.py DIR [--time-limit 10]

Prints which search runs (the compiled one, arena/planning/_search.c, or the Python one:
set ARENA_PURE_PYTHON=1 for it), then per instance: blocks, bytes without a limit, bytes
with the limit, the ratio to 1,048,576 and to LOAD, whether the plan is proven optimal,
and the wall seconds and CPU seconds of the planning with the limit.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"search: {search.SEARCH_PATH} {search.WHY_PYTHON}".rstrip())
    print("name blocks plain_bytes limited_bytes /best /LOAD optimal limit_reached seconds cpu")
    for path in sorted(args.dir.glob("*.csv")):
        with path.open() as f:
            rows = list(csv.DictReader(f))
        blocks = [(int(r["size"]), int(r["lower"]), int(r["upper"]) - 1) for r in rows]
        plain = plan_offsets(blocks, alignment=1024)
        start, cpu = time.perf_counter(), time.process_time()
        plan = plan_offsets(blocks, alignment=1024, time_limit=args.time_limit)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(
            f"{path.stem.split('.')[0]} {len(blocks)} {plain.total_bytes} {plan.total_bytes} "
            f"{plan.total_bytes / BEST_KNOWN:.4f} {plan.ratio:.4f} {plan.optimal} "
            f"{plan.limit_reached} {seconds:.2f} {cpu:.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
