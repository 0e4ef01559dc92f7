"""A host allocation NumPy refuses (a real out-of-memory) is asked for once: the compiled
allocation declined and the Python version asked NumPy again (and, on a slot's growth,
the compiled growth and then the source each asked once more: three np.empty calls of
the same size). The error is an ArenaOutOfMemoryError (an ArenaError and a MemoryError)
naming the bytes and the fix, on every path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from arena import ArenaError
from arena.errors import ArenaOutOfMemoryError
from arena.memory import sources
from arena.memory.ledger import Ledger, compiled_replace
from arena.memory.sources import HostSource, host_allocator
from tests.conftest import need_compiled_hit
from tests.refcounts import assert_counts_flat

#: More than any address space: NumPy's allocation fails at once, whatever the overcommit.
HUGE = 1 << 60
WHAT = "the scratch buffer of slot (ubatch 0, lane 0)"


def _counting_empty(monkeypatch: pytest.MonkeyPatch, compiled: bool = True) -> list[int]:
    """Count the Python version's np.empty calls (and pass them on); without
    ``compiled``, the Python version alone runs."""
    HostSource().allocate(1)  # fills sources._HOST_EMPTY
    calls: list[int] = []
    empty, dtype, made, tries = sources._HOST_EMPTY

    def counted(nbytes: int, kind: Any) -> Any:
        calls.append(nbytes)
        return empty(nbytes, kind)

    taken = [counted, dtype, made, tries] if compiled else [counted, dtype, None, None]
    monkeypatch.setattr(sources, "_HOST_EMPTY", taken)
    return calls


def _compiled_in_use() -> None:
    if host_allocator() is None:
        need_compiled_hit()  # skips (or fails under ARENA_REQUIRE_COMPILED=1) with why
        pytest.skip("the compiled host allocation is not in use here")


def _check(error: BaseException, nbytes: int) -> None:
    assert isinstance(error, ArenaOutOfMemoryError)
    assert isinstance(error, ArenaError) and isinstance(error, MemoryError)
    text = str(error)
    assert f"{nbytes} bytes of host memory" in text and "request less" in text


def test_the_python_version_asks_numpy_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_empty(monkeypatch, compiled=False)
    with pytest.raises(ArenaOutOfMemoryError) as caught:
        HostSource().allocate(HUGE)
    _check(caught.value, HUGE)
    assert isinstance(caught.value.__cause__, MemoryError)  # NumPy's own
    assert len(calls) == 1


def test_the_compiled_refusal_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled_in_use()
    calls = _counting_empty(monkeypatch)
    allocator = host_allocator()
    assert allocator.tries(HUGE) and not allocator.tries(0) and not allocator.tries(8.0)
    with pytest.raises(ArenaOutOfMemoryError) as caught:
        HostSource().allocate(HUGE)
    _check(caught.value, HUGE)
    assert calls == []  # the compiled allocation asked NumPy; the Python one did not
    block = HostSource().allocate(np.int64(64))  # type: ignore[arg-type]
    assert block.nbytes == 64 and calls == [64 + sources.HOST_ALIGNMENT]  # declined: Python


def test_the_compiled_growth_raises_the_ledgers_error_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _compiled_in_use()
    calls = _counting_empty(monkeypatch)
    replace = compiled_replace()
    assert replace is not None
    ledger = Ledger(HostSource())
    held = [ledger.replace([], 100, WHAT)]
    with pytest.raises(ArenaOutOfMemoryError) as caught:
        replace(ledger, held, HUGE, WHAT)
    error = caught.value
    assert str(error).startswith(f"could not allocate {HUGE} bytes")
    _check(error.__cause__, HUGE)  # the source's error, as Ledger.replace raises from it
    assert held == [] and calls == []
    assert (ledger.allocations, ledger.frees, ledger.live_blocks, ledger.ooms) == (1, 1, 0, 1)
    assert ledger.trace[-1][0] == "allocate failure"


def test_the_python_growth_gives_the_same_error_and_books(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _compiled_in_use()
    found = []
    for compiled in (True, False):
        ledger = Ledger(HostSource())
        held = [ledger.replace([], 100, WHAT)]
        with pytest.raises(ArenaOutOfMemoryError) as caught:
            block = compiled_replace()(ledger, held, HUGE, WHAT) if compiled else None
            if block is None:
                ledger.replace(held, HUGE, WHAT)
        counts = (ledger.allocations, ledger.frees, ledger.live_blocks, ledger.ooms)
        found.append((str(caught.value), counts, [t[0] for t in ledger.trace]))
    assert found[0] == found[1]


_PROGRAM = textwrap.dedent(
    """
    import arena
    ws = arena.Arena("cpu", framework="numpy", source="host")
    ws.get_simultaneous(((8,), "uint8"))
    print("GO", flush=True)
    try:
        ws.get_simultaneous(((SIZE,), "uint8"))
    except arena.ArenaOutOfMemoryError as error:
        print("REFUSED", type(error).__name__, flush=True)
    ws.get_simultaneous(((64,), "uint8"))  # still usable
    print("DONE", ws.stats().slots[0].capacity, flush=True)
    """
).replace("SIZE", str(HUGE // 2**14))  # 64 TiB: refused (by the mmap NumPy asks for)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.exists("/usr/bin/strace"),
    reason="counts the failed mmap calls with strace (Linux)",
)
@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_a_real_out_of_memory_asks_the_system_once(pure: bool, tmp_path: Any) -> None:
    """The process's own failed mmap calls of the block's size: glibc's malloc asks a
    few times per malloc() of a size past what it can map; count them for one np.empty
    of that size, then for the arena's refused growth: the same."""
    size = HUGE // 2**14
    env = dict(os.environ)
    env.pop("ARENA_SOURCE", None)
    env.pop("ARENA_PURE_PYTHON", None)
    if pure:
        env["ARENA_PURE_PYTHON"] = "1"

    def failed_maps(program: str) -> int:
        log = tmp_path / "trace.txt"
        done = subprocess.run(
            [
                "/usr/bin/strace",
                "-f",
                "-e",
                "trace=mmap",
                "-o",
                str(log),
                sys.executable,
                "-c",
                program,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        lines = log.read_text().splitlines()
        return sum(1 for line in lines if "ENOMEM" in line and str(size)[:6] in line)

    once = failed_maps(
        f"import numpy as np\ntry:\n    np.empty({size} + 4096, np.uint8)\n"
        "except MemoryError:\n    pass\n"
    )
    if once == 0:
        pytest.skip("this system's NumPy/libc do not mmap a refused block")
    assert failed_maps(_PROGRAM) == once


def test_refusals_keep_reference_counts_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled growth's and allocation's refusals leave every count as it was: the
    errors, their causes and NumPy's error are given back."""
    _compiled_in_use()
    replace = compiled_replace()
    allocator = host_allocator()
    ledger = Ledger(HostSource())
    size, what = HUGE + 1, WHAT + "."  # objects of this test's own
    watched = (size, what, ledger, np.dtype(np.uint8), ArenaOutOfMemoryError)

    def refuse() -> None:
        with pytest.raises(ArenaOutOfMemoryError):
            replace(ledger, [], size, what)
        with pytest.raises(ArenaOutOfMemoryError):
            HostSource().allocate(size)
        assert allocator.allocate(size) is None and allocator.tries(size)
        ledger.trace.clear()

    refuse()

    def refusals() -> None:
        for _ in range(300):
            refuse()

    # The caught errors' tracebacks are cycles through this frame: the check collects them.
    before = ledger.ooms
    assert_counts_flat(watched, refusals)
    assert ledger.ooms in (before + 300, before + 600)  # measured once, or twice
