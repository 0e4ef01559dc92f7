"""Gaps in the front's tests that mutation Round 15a found: mutants of ``arena/front.py``
that the ``plans`` group's runs let through (they leave the JAX tests out), each test
failing with its mutant planted and needing no JAX computation (mutmut's forked children
hang in one)."""

from __future__ import annotations

import sys
import weakref
from typing import Any

import pytest

from arena import Allocation, Arena, ConfigError
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import HostMemoryAsCuda, fake_cupy, install
from tests.sources import RecordingSource


def test_the_scratch_views_of_a_cuda_arena_are_cupy_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CUDA arena ``ws.jax.scratch_callback``'s scratch views are CuPy arrays, not
    NumPy arrays over device memory (Round 15a: ``Front.scratch_callback`` #38, ``and
    False`` after ``device.is_cuda``, asked for the NumPy adapter, which refuses a CUDA
    arena: no callback could be made on a GPU). Checked on the CPU
    with the stand-in CuPy over host memory of ``tests/memory/test_cuda_fakes.py``; the
    GPU test of ``tests/adapters/test_jax_scratch_callback.py`` checks it on a device."""
    jax = pytest.importorskip("jax")
    import arena.adapters

    cupy = with_arrays(fake_cupy())
    install(monkeypatch, cupy=cupy, torch=None)
    # The CuPy adapter imported against the stand-in for this test only (as the CuPy
    # front's tests there do): setitem first, so monkeypatch drops the module afterwards.
    monkeypatch.setitem(sys.modules, "arena.adapters.cupy", None)
    del sys.modules["arena.adapters.cupy"]
    monkeypatch.setattr(arena.adapters, "cupy", None, raising=False)
    source = HostMemoryAsCuda(cupy, cupy_owner=True)
    with Arena(source=source, framework="cupy", capture_probe=lambda: False) as ws:
        assert ws.device.is_cuda
        call: Any = ws.jax.scratch_callback(
            print,
            jax.ShapeDtypeStruct((1,), "float32"),
            scratch=[((4,), "float32"), ((2, 3), "int32")],
        )
        views = call.views
        assert [type(v) for v in views] == [cupy.ndarray, cupy.ndarray]
        assert [v.shape for v in views] == [(4,), (2, 3)]
        assert ws.cupy.data_ptr(views[1]) - ws.cupy.data_ptr(views[0]) == 256  # one layout


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_scratch_callback_asked_of_another_front_names_the_one_to_use(framework: str) -> None:
    """``scratch_callback`` on a front other than ``ws.jax`` is refused with a message that
    names the front to use and the one asked, before anything is made (Round 15a:
    ``Front.scratch_callback`` #5, the message made None; the JAX tests that check it are
    left out of the ``plans`` group's runs)."""
    if framework == "torch":
        pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        front = ws.front(framework)
        with pytest.raises(ConfigError) as caught:
            front.scratch_callback(print, None, scratch=[((1,), "uint8")])
        assert str(caught.value) == (
            "scratch_callback runs inside jax.jit: use ws.jax.scratch_callback, not the "
            f"{framework} front"
        )
        assert ws.memory_stats()["arena.workspace_bytes"] == 0


class _OwnersWatched(RecordingSource):
    """A host source that records, at each allocation, whether the memory of a block it
    handed out before is still alive (a growth releases the old one first)."""

    def __init__(self) -> None:
        super().__init__()
        self.owners: list[weakref.ref[Any]] = []
        self.alive_at_allocation: list[bool] = []

    def allocate(self, nbytes: int) -> Allocation:
        self.alive_at_allocation.append(any(ref() is not None for ref in self.owners))
        allocation = super().allocate(nbytes)
        self.owners.append(weakref.ref(allocation.owner))
        return allocation


def test_a_growing_request_lets_the_old_block_go_before_the_new_one_is_asked_for(
    hit_path: str,
) -> None:
    # planted49: Front._request without `buffer = cache = None` before the miss path held
    # the old buffer (and its remembered views) in its frame across the slot's growth, so
    # the old memory was still alive when the source was asked for the new block (the
    # peak old + new where the ledger counts the new size alone); tests/memory,
    # tests/views, tests/test_gaps.py and the front's test files passed with it.
    source = _OwnersWatched()
    with Arena(source=source, framework="numpy") as a:
        for n in (4096, 4096, 1 << 20):  # remembered, served by the hit, then a growth
            a.get_simultaneous(((n,), "uint8"))
        assert source.alive_at_allocation == [False, False], hit_path
