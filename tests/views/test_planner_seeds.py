"""A new front's Planner learns the dtypes the process resolved already (issue 32 item 4):
a new arena's first sighting of a structure whose dtype objects an earlier arena used
resolves nothing in Python, as it would in a running engine. Only objects that live as
long as the process are kept (types, NumPy's canonical dtype objects, arena's DType
objects), at most PLANNER_SEEDS of them; strings and dtype objects made per call never."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from arena.views import hit

pytestmark = pytest.mark.skipif(
    hit.compiled is None, reason="the compiled hit path is not in use here"
)

_PROBE = r"""
import json, sys
import numpy as np
import arena
from arena.base import dtypes

calls = []

def trace(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == dtypes.__file__:
        calls.append(frame.f_code.co_name)

def first_sighting(specs):
    '''The traced never-seen request of a new arena (its warm-up request first).'''
    ws = arena.Arena("cpu", framework="numpy")
    ws.get_simultaneous(((1,), "uint8"))
    calls.clear()
    sys.settrace(trace)
    try:
        views = ws.get_simultaneous(*specs)
    finally:
        sys.settrace(None)
    assert [v.dtype for v in views] == [np.dtype(d) for _, d in specs], views
    ws.close()
    return list(calls)

odd = np.dtype(np.float32, metadata={"made": "per call"})
out = {"empty": [repr(d) for d in dtypes.seeds()]}
out["first"] = first_sighting(
    (((4, 4), np.dtype("float16")), ((3,), np.int32), ((2,), "int8"), ((5,), odd))
)
out["seeds"] = [repr(d) for d in dtypes.seeds()]
# Another arena, another structure, the same dtype objects: nothing resolved in Python.
out["again"] = first_sighting((((7,), np.int32), ((2, 2, 2), np.dtype("float16"))))
# A string is never kept: its first sighting on a new arena resolves it again.
out["string"] = first_sighting((((9,), "int8"),))
canonical = [np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64",
             "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
             "complex64", "complex128")]
dtypes.resolve_natives(canonical + [d.type for d in canonical], lambda d: None)
out["bound"] = (len(dtypes.seeds()), dtypes.PLANNER_SEEDS, len(set(map(id, dtypes.seeds()))))
print(json.dumps(out))
"""


def _probe() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_new_arena_resolves_only_what_the_process_never_resolved() -> None:
    found = _probe()
    assert found["empty"] == []
    assert "resolve_natives" in found["first"]  # the first arena's Planner asked
    # The float16 dtype object and the int32 type are kept; the string, and the dtype
    # object with metadata (made per call: another object each time), are not.
    assert found["seeds"] == ["dtype('float16')", "<class 'numpy.int32'>"]
    assert found["again"] == []  # learnt when the new front's Planner was made
    assert "resolve_natives" in found["string"]
    seeds, bound, distinct = found["bound"]
    assert seeds == bound == distinct == 16
