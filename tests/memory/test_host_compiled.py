"""The compiled host allocation (arena/memory/_host.c) against its pure-Python mirror
(``HostSource.allocate`` with the compiled one set aside): the same object, the same
errors, flat reference counts; and ``ARENA_PURE_PYTHON=1`` runs the mirror."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.environment import flag_from_env
from arena.memory import sources
from arena.memory.devices import CPU
from arena.memory.sources import HOST_ALIGNMENT, Allocation, HostSource
from tests.conftest import check_pure_python_switch
from tests.refcounts import assert_counts_flat

REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")
SIZES = (1, 255, 4096, 4097, 10_000, 1 << 20, (1 << 22) + 3)


def _compiled() -> Any:
    """The compiled ``allocate``; the test skips where it is not in use (not built, or
    ``ARENA_PURE_PYTHON=1``), and fails instead under ``ARENA_REQUIRE_COMPILED=1``."""
    HostSource().allocate(1)  # fills sources._HOST_EMPTY
    made = sources._HOST_EMPTY[2]
    if made is None:
        reason = f"the compiled host allocation is not in use here: {sources.WHY_PYTHON}"
        if REQUIRE_COMPILED and sources.WHY_PYTHON != "ARENA_PURE_PYTHON is set":
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)
    return made


def python_host_block(nbytes: Any) -> Allocation:
    """``HostSource.allocate``'s Python version: the compiled one set aside for the call."""
    made = sources._HOST_EMPTY[2]
    sources._HOST_EMPTY[2] = None
    try:
        return HostSource().allocate(nbytes)
    finally:
        sources._HOST_EMPTY[2] = made


def _described(block: Allocation) -> dict[str, Any]:
    """Everything about a host block but its address."""
    owner, raw = block.owner, block.owner.base
    start = block.ptr - raw.__array_interface__["data"][0]
    return {
        "type": type(block),
        "fields": [f.name for f in dataclasses.fields(block)],
        "nbytes": (type(block.nbytes), block.nbytes),
        "device": block.device,
        "owner": (type(owner), owner.dtype, owner.shape, owner.strides, owner.nbytes),
        "owner flags": _flags(owner),
        "owner address": owner.__array_interface__["data"] == (block.ptr, False),
        "raw": (type(raw), raw.dtype, raw.shape, raw.base, _flags(raw)),
        "start": 0 <= start < HOST_ALIGNMENT,
        "aligned": block.ptr % HOST_ALIGNMENT,
        "no dict": hasattr(block, "__dict__"),
    }


def _flags(array: Any) -> dict[str, bool]:
    names = ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED")
    return {name: bool(array.flags[name]) for name in names}


@pytest.mark.parametrize("nbytes", SIZES)
def test_the_compiled_host_block_is_the_python_one(nbytes: int) -> None:
    made = _compiled()
    block = made(nbytes)
    mirror = python_host_block(nbytes)
    assert _described(block) == _described(mirror)
    assert block.device is CPU
    assert block.owner.base.nbytes == nbytes + HOST_ALIGNMENT
    # The frozen dataclass its fields build, equal both ways, with the same repr.
    built = Allocation(block.ptr, block.nbytes, block.owner, block.device)
    assert block == built and built == block and repr(block) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        block.nbytes = 1  # type: ignore[misc]
    # The owner is the block: writes land in its raw array at the aligned start.
    if nbytes:
        block.owner[:] = 7
        block.owner[-1] = 9
        start = block.ptr - block.owner.base.__array_interface__["data"][0]
        assert block.owner.base[start : start + nbytes].tolist() == [7] * (nbytes - 1) + [9]


@pytest.mark.parametrize("nbytes", [0, -1, 1 << 62, 2**63, 2**70, np.int64(8), 8.0, True])
def test_the_compiled_allocation_declines_to_the_python_version(nbytes: Any) -> None:
    """A refusal (NumPy's, or a size that is not a positive int) is None with no
    exception: HostSource.allocate then runs the Python version, whose block or error it
    gives."""
    made = _compiled()
    assert made(nbytes) is None
    try:
        mirror = python_host_block(nbytes)
    except Exception as exc:  # any error: the same one must come out
        with pytest.raises(type(exc)) as caught:
            HostSource().allocate(nbytes)
        assert str(caught.value).split(":")[0] == str(exc).split(":")[0]
    else:
        assert _described(HostSource().allocate(nbytes)) == _described(mirror)


def test_a_declined_size_still_gets_the_python_block() -> None:
    """What the compiled path declines but NumPy accepts is built by the Python version."""
    _compiled()
    block = HostSource().allocate(np.int64(300))  # type: ignore[arg-type]
    assert block.nbytes == 300 and block.ptr % HOST_ALIGNMENT == 0


def test_the_compiled_allocation_keeps_reference_counts_flat() -> None:
    made = _compiled()
    nbytes = 5000
    first = made(nbytes)
    watched = (nbytes, CPU, Allocation, np.ndarray, first.owner.dtype, first.owner.base.dtype)
    del first

    def allocations() -> None:
        for _ in range(100_000):
            made(nbytes)

    assert_counts_flat(watched, allocations)
    # The block holds one reference to its owner, which holds one to its raw array, as
    # the Python version's do.
    block, mirror = made(nbytes), python_host_block(nbytes)
    counts = [sys.getrefcount(o) for o in (block, block.owner, block.owner.base)]
    assert counts == [sys.getrefcount(o) for o in (mirror, mirror.owner, mirror.owner.base)]


def test_growth_serves_from_compiled_blocks() -> None:
    made = _compiled()
    assert made is sources._HOST_EMPTY[2]
    # A HostSource named: ARENA_SOURCE=virtual makes the fixed-address source the default.
    with Arena("cpu", framework="numpy", source=HostSource()) as arena:
        arena.reserve_bytes(1000)
        small = arena.get_simultaneous(((10,), "float32"))[0]
        small[:] = 1.0
        views = arena.get_simultaneous(((1000,), "float32"), ((3, 5), "int8"))
        views[0][:] = 2.0
        assert arena.stats().allocations == 2
        assert small.tolist() == [1.0] * 10  # the outgrown buffer lives on for its views
        assert views[0].sum() == 2000.0


def test_arena_pure_python_runs_the_python_host_allocation() -> None:
    code = (
        "from arena.memory import sources; sources.HostSource().allocate(1); "
        "print(sources._HOST_EMPTY[2] is None, sources.WHY_PYTHON or '-')"
    )
    check_pure_python_switch(code, "arena.memory._host", compiled="False", python="True")
