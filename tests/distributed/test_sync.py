"""``ws.sync(group)`` and ``ws.lock(group=...)``: ranks that warmed up on skewed data lock
at the worst any rank saw, keys only one rank had are sized everywhere, and nothing hangs.

Spawned gloo ranks (2 and 4 processes) and JAX processes run tests/distributed/ranks.py;
the exchange's own rules run on ranks as threads of this process (tests/threadgroup.py).
"""

from __future__ import annotations

import ast
import gc
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import arena
from arena import Arena, ArenaLockedError, ArenaSyncError, ConfigError
from tests.forkchild import WAIT_FOR_CHILD
from tests.stepping import layer
from tests.threadgroup import RankGroup, ThreadRanks

WORKER = Path(__file__).with_name("ranks.py")
ROOT = WORKER.parents[2]
MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Ranks:
    """``world`` spawned ranks of ``mode``; :meth:`results` waits for them in rank order
    (killing every rank left on a timeout, so none outlives the test), and closes each
    one's stdin as it waits for it: a rank that must outlive the others (the JAX run's
    last) reads its stdin to the end."""

    def __init__(self, mode: str, world: int, *, jax_ends_ranks: bool = False, **env: str) -> None:
        # JAX's coordination service aborts a process once another has gone: a rank that
        # printed its result and OK passes whatever its exit code.
        self.jax_ends_ranks = jax_ends_ranks
        port = _free_port()
        environ = dict(os.environ, **env)
        environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), environ.get("PYTHONPATH")])
        )
        # Each rank its own hash seed: the plans must not depend on one.
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), mode, str(rank), str(world), str(port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**environ, "PYTHONHASHSEED": str(rank + 1)},
            )
            for rank in range(world)
        ]
        self._results: list[dict[str, Any]] | None = None

    def results(self) -> list[dict[str, Any]]:
        if self._results is None:
            outputs = []
            try:
                for proc in self.procs:
                    out, err = proc.communicate(timeout=150)
                    outputs.append((proc.returncode, out, err))
            finally:
                self.kill()
            found = []
            for rank, (code, out, err) in enumerate(outputs):
                finished = out.split()[-2:] == ["OK", str(rank)]
                assert code == 0 or (self.jax_ends_ranks and finished), (
                    f"rank {rank} failed:\n{err[-3000:]}"
                )
                assert out.split()[-2:] == ["OK", str(rank)], out[-2000:]
                line = next(x for x in out.splitlines() if x.startswith("RESULT "))
                found.append(json.loads(line[len("RESULT ") :]))
            self._results = found
        return self._results

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)  # reaps it and closes its pipes


@pytest.fixture(scope="module")
def spawned() -> Iterator[dict[str, _Ranks]]:
    """The gloo runs (2 and 4 ranks) and the JAX run, started at once: the ranks' imports
    overlap instead of adding up."""
    runs: dict[str, _Ranks] = {}
    try:
        if importlib.util.find_spec("torch") is not None:
            for world in (2, 4):
                runs[f"sync{world}"] = _Ranks("sync", world)
        if importlib.util.find_spec("jax") is not None:
            runs["jax"] = _Ranks("jaxsync", 2, jax_ends_ranks=True, JAX_PLATFORMS="cpu")
        yield runs
    finally:
        for run in runs.values():
            run.kill()


def _check_agreed(results: list[dict[str, Any]], world: int) -> None:
    """Every rank locked at the largest capacity any rank had before, in every slot, with
    the same step offsets; rank 0's keys reached every rank; nothing allocated locked."""
    largest = max(c for r in results for c in r["before"])
    assert [r["report_rank"] for r in results] == [[rank, world] for rank in range(world)]
    for r in results:
        assert r["locked"] == [largest, largest], r
        assert r["offsets"] == results[0]["offsets"]
        assert r["partial"] == [
            "step 'only-rank0' of slot (ubatch 1, lane 0)",
            "workspace 'lib-rank0' of slot (ubatch 0, lane 0)",
        ]
        assert r["not_taken"] == []
        assert r["max_bytes"] == 64 * MIB  # the smallest cap (rank 0's)
        assert r["schemas"] == [2, 1]  # the second sync finds every rank alike
        assert r["new_allocations"] == 0 and r["allocations_while_locked"] == 0
    # The skew is real: the ranks did not start alike.
    assert len({tuple(r["before"]) for r in results}) == world


@pytest.mark.parametrize("world", [2, 4])
def test_skewed_ranks_lock_alike_over_gloo_and_a_rank_that_skips_sync_is_named(
    world: int, spawned: dict[str, _Ranks]
) -> None:
    pytest.importorskip("torch.distributed")
    results = spawned[f"sync{world}"].results()
    _check_agreed(results, world)
    missing = world - 1  # never calls sync() on the 2-second group
    for r in results[:missing]:
        assert r["skipped"].startswith("arena sync over the gloo group"), r["skipped"]
        assert r["skipped_seconds"] < 20  # the group's 2 s timeout, not a hang
    assert f"Ranks {missing} failed to pass monitoredBarrier" in results[0]["skipped"]
    for r in results[1:missing]:
        assert "rank 0" in r["skipped"]  # gloo names the rank that knows the missing one
    assert "skipped" not in results[missing]


def test_skewed_jax_processes_lock_alike_and_one_that_skips_sync_is_timed_out(
    spawned: dict[str, _Ranks],
) -> None:
    pytest.importorskip("jax")
    results = spawned["jax"].results()
    _check_agreed(results, 2)
    skipped = results[0]["skipped"]
    assert skipped.startswith("arena sync over the JAX processes, rank 0 of 2"), skipped
    assert "did not finish within 3.0 s" in skipped
    assert results[0]["skipped_seconds"] < 20  # the group's 3 s, not a hang


@pytest.mark.gpu
def test_skewed_ranks_lock_alike_over_nccl() -> None:
    """One rank per CUDA device (up to 4; with one device, one rank: the NCCL path of the
    exchange still runs end to end)."""
    torch = pytest.importorskip("torch")
    world = min(torch.cuda.device_count(), 4)
    results = _Ranks("nccl", world).results()
    largest = max(c for r in results for c in r["before"])
    for r in results:
        assert r["locked"] == [largest, largest]
        assert r["offsets"] == results[0]["offsets"]
        assert r["partial"] == (
            ["workspace 'lib-rank0' of slot (ubatch 0, lane 0)"] if world > 1 else []
        )
        assert r["new_allocations"] == 0 and r["allocations_while_locked"] == 0


# ---------------------------------------------------------------- the exchange's rules
def _warm(ws: Arena, tokens: int) -> None:
    layer(ws, tokens)
    layer(ws, tokens)


def test_ranks_agree_on_every_key_and_the_largest_sizes() -> None:
    ranks = ThreadRanks(3)

    def body(rank: int, group: RankGroup) -> tuple[Any, ...]:
        with Arena("cpu", framework="numpy", ubatches=2) as ws:
            _warm(ws, 16 * (rank + 1))
            ws.get_persistent(("state", rank), (8 * (rank + 1),), "float32")
            with ws.ubatch(1):
                ws.get_library_workspace(f"lib{rank}", 1000 * (rank + 1))
            report = ws.sync(group)
            ws.lock()
            stats = ws.stats()
            layout = [(s.capacity, s.persistent_keys, s.workspace_keys) for s in stats.slots]
            return report, layout, [layer(ws, 48) for _ in range(2)], stats

    results = ranks.run(body)
    reports = [r[0] for r in results]
    assert all(r.before != reports[0].before for r in reports[1:])
    assert len({r[1].__repr__() for r in results}) == 1  # the same slots everywhere
    _, persistent, workspaces = results[0][1][0]
    assert persistent == 3 and workspaces == 3
    assert reports[0].partial == tuple(sorted(reports[0].partial))
    assert len(reports[0].partial) == 6  # 3 persistent keys, 3 workspaces: one rank each
    for report, (_, _, pointers, stats) in zip(reports, results, strict=True):
        assert report.after[0] >= max(r.before[0] for r in reports)
        assert stats.allocations_while_locked == 0
        assert pointers[0] == pointers[1]


def test_ranks_rebuilding_keys_at_once_never_meet_in_the_parser() -> None:
    """Each rank rebuilds the keys only the others had with ``ast.literal_eval``, all ranks
    at once. CPython 3.11 up to 3.11.7 and 3.12 up to 3.12.1 count the AST constructor's
    recursion in one field of the interpreter (gh-106905): a parse during which another
    thread parses raises SystemError ("AST constructor recursion depth mismatch"). A
    collection inside a parse runs finalizers (an earlier test's garbage arena closing),
    which may hand the GIL to another rank; here every collection inside ``ast.parse``
    does, so ranks that parse at once meet there on every run (seen once in a full-suite
    run, in test_ranks_agree_on_every_key_and_the_largest_sizes)."""
    parse = ast.parse.__code__

    def hand_over(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and sys._getframe(1).f_code is parse:
            time.sleep(0.001)  # another rank takes the GIL mid-parse

    ranks = ThreadRanks(3)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            for k in range(4):
                ws.get_library_workspace(("lib", rank, k), 1024)
            return ws.sync(group).partial

    threshold = gc.get_threshold()
    gc.callbacks.append(hand_over)
    gc.set_threshold(1)  # a collection at nearly every allocation, inside the parses too
    try:
        results = ranks.run(body)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(hand_over)
    assert [type(r) for r in results] == [tuple] * 3, results
    assert all(len(r) == 12 for r in results)  # every rank took the others' 8 keys


FORK_WHILE_PARSING = (
    """
import ast, gc, os, signal, sys, threading, time, warnings
from arena.distributed import state
"""
    + WAIT_FOR_CHILD
    + """

parse = ast.parse.__code__
inside, go = threading.Event(), threading.Event()
armed = [True]

def gate(phase, info):  # holds the thread inside its parse, the key lock taken
    if phase == "start" and armed[0] and sys._getframe(1).f_code is parse:
        armed[0] = False
        inside.set()
        go.wait(30)

gc.callbacks.append(gate)
gc.set_threshold(1)
thread = threading.Thread(target=state._rebuild, args=("('rank', 1)", {}))
thread.start()
assert inside.wait(30)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
    pid = os.fork()
if pid == 0:  # the child: exit 0 only if it rebuilds a key
    code = 1
    try:
        code = 0 if state._rebuild("('rank', 2)", {}) == (True, ("rank", 2)) else 1
    finally:
        os._exit(code)
go.set()
thread.join(30)
sys.exit(wait_for_child(pid, "the forked child hung on the copied key lock"))
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_key_is_parsed_rebuilds_keys() -> None:
    """A thread holds the key lock (inside its parse) while the main thread forks: the
    child's own rebuild must complete, not wait forever on the copied lock. In a fresh
    interpreter, as tests/test_threads.py forks."""
    result = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_PARSING],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_identical_ranks_need_two_collectives_and_bytes_that_do_not_grow_with_ranks() -> None:
    payloads = {}
    for world in (2, 8):
        ranks = ThreadRanks(world)

        def body(rank: int, group: RankGroup) -> Any:
            with Arena("cpu", framework="numpy") as ws:
                _warm(ws, 32)
                return ws.sync(group)

        reports = ranks.run(body)
        assert {r.collectives for r in reports} == {2}
        assert {r.schemas for r in reports} == {1}
        assert ranks.calls[0] == [("all_reduce_max", 7), ranks.calls[0][1]]
        payloads[world] = reports[0].payload_bytes
    assert payloads[2] == payloads[8]


def test_ranks_with_different_keys_send_each_distinct_schema_once() -> None:
    """Two schemas among 8 ranks: the union costs both schemas, not 8 copies."""
    ranks = ThreadRanks(8)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            _warm(ws, 32)
            if rank % 2:
                ws.get_library_workspace("odd", 4096)
            return ws.sync(group)

    reports = ranks.run(body)
    assert {r.schemas for r in reports} == {2}
    union = ranks.calls[0][2][1]  # the reduce that carries the distinct schemas
    assert all(calls[2] == ("all_reduce_max", union) for calls in ranks.calls)
    assert union * 7 < 2 * 1000  # two small schemas laid end to end, 7 bytes per int
    assert all(r.partial == ("workspace 'odd' of slot (ubatch 0, lane 0)",) for r in reports)


def test_ranks_configured_differently_all_raise_and_none_hangs() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy", ubatches=1 + rank) as ws:
            return ws.sync(group)

    results = ranks.run(body)
    for result in results:
        assert isinstance(result, ArenaSyncError)
        assert "differ in configuration" in str(result) and "[1, 1, 256], [2, 1, 256]" in str(
            result
        )


def test_a_rank_that_never_joins_ends_the_others_with_the_named_error() -> None:
    ranks = ThreadRanks(3, timeout=0.5)

    def body(rank: int, group: RankGroup) -> Any:
        if rank == 2:
            return "skipped"
        with Arena("cpu", framework="numpy") as ws:
            return ws.sync(group)

    results = ranks.run(body)
    for result in results[:2]:
        assert isinstance(result, ArenaSyncError)
        assert "all_reduce_max of the group" in str(result) and "BrokenBarrierError" in str(result)


def test_the_smallest_cap_wins_and_no_cap_is_no_limit() -> None:
    ranks = ThreadRanks(3)

    def body(rank: int, group: RankGroup) -> Any:
        cap = [None, 64 * MIB, 32 * MIB][rank]
        with Arena("cpu", framework="numpy", max_bytes=cap) as ws:
            return ws.sync(group).max_bytes, ws.stats().locked

    assert ranks.run(body) == [(32 * MIB, False)] * 3
    alone = ThreadRanks(2)
    assert alone.run(lambda rank, group: Arena("cpu", framework="numpy").sync(group).max_bytes) == [
        None,
        None,
    ]


def test_a_locked_arena_that_another_rank_outgrew_refuses_and_the_others_go_on() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((1000 * (rank + 1),), "float32"))
            if rank == 0:
                ws.lock()
            return ws.sync(group).after

    small, large = ranks.run(body)
    assert isinstance(small, ArenaLockedError) and "sync() on a locked arena" in str(small)
    # What the locked rank holds and what the agreed size needs, by its slot (Round 12b).
    assert (small.required, small.current, small.slot) == (8192, 4096, (0, 0))
    assert large == (8192,)


def test_locked_ranks_that_already_agree_sync_again_without_error() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            _warm(ws, 16 * (rank + 1))
            ws.lock(group=group)
            with ws.scope() as scope:  # fits, but larger than any request before it
                scope.get_simultaneous(((1000 * (rank + 1),), "float32"))
            return ws.sync(group).after, ws.stats().allocations_while_locked

    first, second = ranks.run(body)
    assert first == second and first[1] == 0


def test_a_step_recorded_differently_takes_the_larger_structure_on_every_rank() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(2):
                with ws.step("s") as st:
                    for _ in range(rank + 1):  # rank 1 makes two requests
                        st.get_simultaneous(((256,), "float32"))
            ws.sync(group)
            ws.lock()
            with ws.step("s") as st:
                views = [st.get_simultaneous(((256,), "float32"))[0] for _ in range(2)]
            return [ws.numpy.data_ptr(v) - ws.numpy.data_ptr(views[0]) for v in views]

    first, second = ranks.run(body)
    assert first == second == [0, 1024]


def test_keys_that_cannot_travel_are_sized_where_they_are_and_reported_elsewhere() -> None:
    class Key:
        def __repr__(self) -> str:
            return "Key()"

        def __hash__(self) -> int:
            return 1

    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 0:
                ws.get_library_workspace(Key(), 2048)
            return ws.sync(group).not_taken

    assert ranks.run(body) == [(), ("workspace Key() of slot (ubatch 0, lane 0)",)]


def test_a_group_that_is_none_of_the_kinds_is_refused() -> None:
    with Arena("cpu", framework="numpy") as ws, pytest.raises(ConfigError, match="group must"):
        ws.sync(object())


def test_a_group_returning_the_wrong_length_is_named() -> None:
    class Short:
        def all_reduce_max(self, values: list[int]) -> list[int]:
            return values[:-1]

        def all_gather(self, data: bytes) -> list[bytes]:
            return [data]

    with Arena("cpu", framework="numpy") as ws, pytest.raises(ArenaSyncError, match="6 ints"):
        ws.sync(Short())


def test_import_arena_imports_no_framework_for_sync() -> None:
    code = (
        "import sys, arena\n"
        "class G:\n"
        "    def all_reduce_max(self, v): return list(v)\n"
        "    def all_gather(self, b): return [b]\n"
        "ws = arena.Arena('cpu', framework='numpy')\n"
        "ws.lock(group=G())\n"
        "assert not {'torch', 'jax'} & set(sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)
    assert arena.SyncReport is arena.distributed.SyncReport


def test_sync_with_no_group_needs_an_initialised_default_group() -> None:
    dist = pytest.importorskip("torch.distributed")
    assert not dist.is_initialized()
    with Arena("cpu", framework="numpy") as ws, pytest.raises(ConfigError, match="init_process"):
        ws.sync()
    with Arena("cpu", framework="numpy") as ws:
        ws.lock(group=None)  # no group: a plain lock, no collective
        assert ws.is_locked
