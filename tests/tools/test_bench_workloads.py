"""The bench's workloads and its vLLM reference (no timing assertions)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from arena.base.layout import compute_layout
from arena.tools import vllmref
from arena.tools.workloads import WORKLOADS, Workload, specs_at

SMALL = [w for w in WORKLOADS if w.name.startswith("<4 MiB")]


def _specs(framework: str, workload: Workload, tokens: int) -> tuple[object, ...]:
    return specs_at(framework, workload)(tokens)  # type: ignore[no-any-return]


@pytest.mark.parametrize("workload", SMALL, ids=lambda w: w.name)
def test_small_workloads_keep_every_view_under_4_mib_and_rotate_their_layouts(
    workload: Workload,
) -> None:
    count = int(workload.name.split(", ")[1].split()[0])
    largest = compute_layout(_specs("numpy", workload, workload.max_tokens))
    assert all(v.nbytes < 4 << 20 for v in largest.views)
    sequence = workload.tokens(random.Random(0), 3 * count)
    assert len(set(sequence)) == count and max(sequence) <= workload.max_tokens
    # In rotation: every pass of `count` steps holds each layout once.
    for start in range(0, 3 * count, count):
        assert sorted(sequence[start : start + count]) == sorted(set(sequence))


def _offsets(buffer_start: int, views: list[object], address: object) -> list[int]:
    return [address(v) - buffer_start for v in views]  # type: ignore[operator]


@pytest.mark.parametrize("tokens", [1, 7, 300, 2048])
def test_vllm_reference_lays_out_like_arena_on_numpy(tokens: int) -> None:
    workload = next(w for w in WORKLOADS if w.name == "<4 MiB, 2048 layouts")
    specs = _specs("numpy", workload, tokens)
    layout = compute_layout(specs)
    buffer = np.zeros(layout.total, np.uint8)
    manager = vllmref.init_workspace_manager([buffer])
    assert vllmref.current_workspace_manager() is manager
    views = manager.get_simultaneous(*specs)  # type: ignore[arg-type]
    start = buffer.__array_interface__["data"][0]
    found = _offsets(start, views, lambda v: v.__array_interface__["data"][0])
    assert found == [v.offset for v in layout.views]
    assert [v.shape for v in views] == [v.shape for v in layout.views]
    assert [v.dtype for v in views] == [d for _, d in specs]
    with pytest.raises(AssertionError, match="locked"):
        manager.get_simultaneous(((layout.total + 1,), np.dtype(np.uint8)))


def test_vllm_reference_lays_out_like_arena_on_torch() -> None:
    torch = pytest.importorskip("torch")
    workload = next(w for w in WORKLOADS if w.name == "fixed")
    specs = _specs("torch", workload, 33)
    layout = compute_layout(specs)
    buffer = torch.zeros(layout.total, dtype=torch.uint8)
    manager = vllmref.init_workspace_manager([buffer])
    views = manager.get_simultaneous(*specs)  # type: ignore[arg-type]
    found = _offsets(buffer.data_ptr(), views, lambda v: v.data_ptr())
    assert found == [v.offset for v in layout.views]
    assert [tuple(v.shape) for v in views] == [v.shape for v in layout.views]
