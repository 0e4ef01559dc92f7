"""Instructions of a never-seen grown 3-view request, for callgrind (issue 27, the
growth's move to the slots layer; docs/performance.md gives the figures).

Each trial is ``arena.tools.checks.never_seen(3, ..., grown=True)``'s: a fresh NumPy arena
holding only a warm-up request's 256 bytes, and a request of a structure no arena saw
(its dimension counts and dtypes drawn anew, the same draws as the check's), so that the
request places the structure and grows the slot. The request is called through
``itertools.starmap`` (which nothing else here calls), so that callgrind counts it alone::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --toggle-collect=starmap_next \\
        python scripts/callgrind-never-seen.py 400

and the instructions it reports ("Collected"), divided by the trials, are one request's.
Two runs of one build differ by about 20 instructions in 55,000; the first trials of a
process cost more (its code is cold), so compare runs of the same trial count.
"""

from __future__ import annotations

import gc
import random
import sys
from itertools import starmap

import numpy as np

from arena import Arena
from arena.tools.workloads import step_function


def main(trials: int) -> None:
    """Run ``trials`` never-seen grown 3-view requests, each on a fresh arena."""
    views = 3
    dtypes = [np.dtype(n) for n in ("float32", "int32", "float16", "int8", "uint16", "int64")]
    rng = random.Random(views + True)  # checks.never_seen's seed for grown=True
    namespace: dict[str, object] = {}
    request = step_function(["return get(*specs)"], namespace)
    for _ in range(trials):
        specs = tuple(
            ((4,) * rng.randint(1, 4), dtypes[rng.randrange(len(dtypes))]) for _ in range(views)
        )
        with Arena("cpu", framework="numpy") as arena:
            arena.get_simultaneous(((1,), np.uint8))  # the buffer's import, another plan
            namespace.update(get=arena.get_simultaneous, specs=specs)
            gc.disable()
            try:
                for _ in starmap(request, ((0,),)):  # the counted call
                    pass
            finally:
                gc.enable()
            if arena.stats().allocations < 2:
                raise AssertionError("the never-seen request did not grow the slot")


if __name__ == "__main__":
    main(int(sys.argv[1]))
