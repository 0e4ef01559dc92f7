"""``write_into`` a torch view from a read-only NumPy array (a ``np.memmap`` opened
``mode="r"``, a broadcast, an array with ``writeable=False``): arena only reads the value,
but ``torch.as_tensor`` of it warned that "writing to this tensor will result in undefined
behavior", torch's ``UserWarning`` and an error wherever warnings are errors (a pytest
``filterwarnings = error`` suite). torch warns once per process, so each case runs in a
fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("arena.adapters.torch")

SCRIPT = """
import json, sys, tempfile, os
import numpy as np, torch
from arena import Arena

case, inference = sys.argv[1], sys.argv[2] == "inference"
values = np.arange(6, dtype=np.float32).reshape(2, 3)
if case == "flag":
    value = values.copy()
    value.flags.writeable = False
elif case == "broadcast":
    value = np.broadcast_to(np.float32(7.0), (2, 3))
else:  # a memmap opened read-only
    path = os.path.join(tempfile.mkdtemp(), "weights.bin")
    values.tofile(path)
    value = np.memmap(path, dtype=np.float32, mode="r", shape=(2, 3))
with Arena("cpu", framework="torch") as ws:
    front = ws.front("torch", inference=inference)
    (view,) = front.get_simultaneous(((2, 3), torch.float32))
    with torch.inference_mode(inference):
        written = front.write_into(view, value)
        seen = written.tolist()
print(json.dumps([seen, np.asarray(value).tolist()]))
"""


@pytest.mark.parametrize("inference", ["normal", "inference"])
@pytest.mark.parametrize("case", ["flag", "broadcast", "memmap"])
def test_a_read_only_numpy_value_is_written_without_warning(case: str, inference: str) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", SCRIPT, case, inference],
        capture_output=True,
        check=False,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen, value = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == value


def test_a_read_only_numpy_value_is_written_in_this_process_without_warning() -> None:
    """The same in pytest's own process, for mutation runs (Round 20: their mutants are not
    active in a new interpreter, so the runs above never see them). torch warns once per
    process, so this fails only where it is the first to make torch warn; the runs above
    check each case afresh."""
    import warnings

    import numpy as np
    import torch

    from arena import Arena

    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    value.flags.writeable = False
    with Arena("cpu", framework="torch") as ws:
        front = ws.front("torch")
        (view,) = front.get_simultaneous(((2, 3), torch.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            written = front.write_into(view, value)
        assert written.tolist() == value.tolist()
