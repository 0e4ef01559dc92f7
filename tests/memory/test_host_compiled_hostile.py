"""Hostile checks of the compiled host allocation (arena/memory/_host.c): declines keep
reference counts flat, a block's memory goes when its last view goes and stays while one
lives (past close()), every size is aligned and described as the Python one, threads
allocating at once get disjoint blocks."""

from __future__ import annotations

import gc
import itertools
import random
import sys
import threading
import weakref
from typing import Any

import numpy as np

from arena import Arena
from arena.memory import sources
from arena.memory.devices import CPU
from arena.memory.sources import HOST_ALIGNMENT, Allocation, HostSource
from tests.memory.test_host_compiled import _compiled, _described, python_host_block
from tests.refcounts import assert_counts_flat


def test_declines_keep_reference_counts_flat() -> None:
    """NumPy refusing the array (a size past memory) and a size that is not a positive int
    leave every reference count as it was: the dtype reference the refused call took is
    given back, nothing is left set."""
    made = _compiled()
    uint8 = np.dtype(np.uint8)
    huge = 1 << 62
    sizes: list[Any] = [huge, 0, -5, 2**70, 8.0, True]
    watched = (uint8, np.ndarray, Allocation, CPU, *sizes)
    for nbytes in sizes:  # warm
        made(nbytes)

    def declines() -> None:
        for _ in range(2000):
            for nbytes in sizes:
                assert made(nbytes) is None

    assert_counts_flat(watched, declines)
    assert sys.exc_info() == (None, None, None)


def test_a_block_is_freed_with_its_last_view_and_not_before() -> None:
    made = _compiled()
    block = made(10_000)
    raw = weakref.ref(block.owner.base)
    view = block.owner[100:200]
    del block
    gc.collect()
    assert raw() is not None  # the view keeps the whole raw array
    view[:] = 5
    assert view.sum() == 500
    del view
    assert raw() is None  # no cycle: freed by reference counting alone


def test_every_size_is_aligned_and_the_python_block() -> None:
    made = _compiled()
    rng = random.Random(7)
    sizes = list(range(1, 300)) + [rng.randint(1, 1 << 21) for _ in range(200)]
    sizes += [HOST_ALIGNMENT * k + d for k in (1, 2, 7) for d in (-1, 0, 1)]
    for nbytes in sizes:
        block = made(nbytes)
        assert block.ptr % HOST_ALIGNMENT == 0 and block.nbytes == nbytes
        assert block.owner.ctypes.data == block.ptr and block.owner.nbytes == nbytes
        assert _described(block) == _described(python_host_block(nbytes))


def test_views_outlive_close_over_many_growths() -> None:
    """Each growth's outgrown block, and the last one after close(), stays valid memory
    for the views made of it."""
    views = []
    with Arena("cpu", framework="numpy", source=HostSource()) as ws:
        for k in range(1, 40):
            view = ws.get_simultaneous(((k * 1000,), "int32"))[0]
            view[:] = k
            views.append(view)
    gc.collect()
    np.empty(1 << 20, np.uint8)[:] = 0xAB  # reuse whatever was freed
    for k, view in enumerate(views, start=1):
        assert view.min() == k and view.max() == k


def test_threads_allocating_at_once_get_disjoint_aligned_blocks() -> None:
    _compiled()
    source = HostSource()
    blocks: list[list[Allocation]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def allocate(mine: list[Allocation]) -> None:
        barrier.wait()
        for k in range(300):
            mine.append(source.allocate(1 + (k * 977) % 50_000))

    threads = [threading.Thread(target=allocate, args=(mine,)) for mine in blocks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans = sorted((b.ptr, b.ptr + b.nbytes) for mine in blocks for b in mine)
    assert len(spans) == 1200
    assert all(ptr % HOST_ALIGNMENT == 0 for ptr, _ in spans)
    for (_, end), (begin, _) in itertools.pairwise(spans):
        assert end <= begin
    assert sources._HOST_EMPTY[2] is not None
