"""Mutation round 13b (issue 26 item 12): the groups ``ws.sync`` runs over, in this
process.

The gloo, NCCL and JAX ranks of test_sync.py run in processes of their own, where
mutmut's mutants are not active, so no mutation run reached :class:`TorchGroup` or
:class:`JaxProcessGroup`. Here a :class:`TorchGroup` wraps a real one-rank gloo group
of this process (its collectives, barrier and timeout are torch's), with torch's
functions wrapped to record which group and options they are given, and
:class:`JaxProcessGroup` runs over a stand-in of ``process_allgather`` that plays a
second process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from arena import ArenaSyncError, ConfigError
from arena.distributed import JaxProcessGroup, TorchGroup
from arena.distributed.groups import as_group

TIMEOUT = timedelta(seconds=7)
SUB_TIMEOUT = timedelta(seconds=5)


@pytest.fixture
def gloo() -> Iterator[Any]:
    """torch.distributed with a one-rank gloo default group (this process), destroyed
    after the test: test_sync.py expects none initialised."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=TIMEOUT)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def _recording(monkeypatch: pytest.MonkeyPatch, dist: Any, name: str) -> list[Any]:
    """Wrap torch.distributed's ``name`` so each call's arguments are kept, then run."""
    calls: list[Any] = []
    real = getattr(dist, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, name, wrapper)
    return calls


def test_a_torch_group_over_gloo_names_itself_and_runs_both_collectives(gloo: Any) -> None:
    group = TorchGroup(None)
    assert (group.backend, group.rank, group.world) == ("gloo", 0, 1)
    assert str(group.device) == "cpu"
    assert group.timeout == TIMEOUT
    assert group.describe() == "gloo group, rank 0 of 1, timeout 7.0 s"
    assert group.all_reduce_max([3, -5, 2**62, -(2**63)]) == [3, -5, 2**62, -(2**63)]
    assert group.all_gather(b"three") == [b"three"]
    assert group.all_gather(b"") == [b""]
    assert as_group(None).describe() == "gloo group, rank 0 of 1, timeout 7.0 s"


def test_a_torch_group_hands_its_own_group_and_options_to_every_collective(
    gloo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = gloo.new_group(ranks=[0], timeout=SUB_TIMEOUT)
    barriers = _recording(monkeypatch, gloo, "monitored_barrier")
    reduces = _recording(monkeypatch, gloo, "all_reduce")
    gathers = _recording(monkeypatch, gloo, "all_gather")
    group = TorchGroup(sub)
    assert group.group is sub and group.timeout == SUB_TIMEOUT  # the subgroup's own
    group.enter()
    assert barriers == [((sub,), {"timeout": SUB_TIMEOUT, "wait_all_ranks": True})]
    assert group.all_reduce_max([1, 2]) == [1, 2]
    ((_, kwargs),) = reduces
    assert kwargs["op"] == gloo.ReduceOp.MAX and kwargs["group"] is sub
    assert kwargs["async_op"] is True
    assert group.all_gather(b"abc") == [b"abc"]
    assert [len(args) for args, _ in gathers] == [2, 2]
    assert all(kw["group"] is sub and kw["async_op"] is True for _, kw in gathers)


def test_a_torch_group_reads_rank_world_and_backend_of_the_group_it_wraps(
    gloo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subgroup of a larger world has its own rank and size: they are the subgroup's
    (stood in for: one process has a world of one)."""
    sub = gloo.new_group(ranks=[0])

    def of(sub_value: Any, world_value: Any) -> Callable[..., Any]:
        return lambda group=None: sub_value if group is sub else world_value

    monkeypatch.setattr(gloo, "get_rank", of(1, 5))
    monkeypatch.setattr(gloo, "get_world_size", of(3, 8))
    monkeypatch.setattr(gloo, "get_backend", of("gloo", "nccl"))
    group = TorchGroup(sub)
    assert (group.backend, group.rank, group.world) == ("gloo", 1, 3)


def test_an_nccl_group_runs_on_the_current_cuda_device(
    gloo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stood in for on the host: the backend says NCCL and CUDA's current device is 3."""
    import torch

    monkeypatch.setattr(gloo, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    group = TorchGroup(None)
    assert group.device == torch.device("cuda", 3)
    assert group.describe() == "nccl group, rank 0 of 1, timeout 7.0 s"
    group.enter()  # a monitored barrier on gloo only: nothing runs


def test_a_torch_that_does_not_say_its_timeout_leaves_it_to_the_backend(
    gloo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another torch, whose process groups keep no backend options where arena reads the
    timeout: the collectives wait as long as the backend does, and messages say so."""

    def gone(self: Any, device: Any) -> Any:
        raise AttributeError("_get_backend")

    monkeypatch.setattr(gloo.ProcessGroup, "_get_backend", gone)
    group = TorchGroup(None)
    assert group.timeout is None and group.seconds is None
    assert group.describe() == "gloo group, rank 0 of 1, the backend's timeout"
    assert group.all_reduce_max([4]) == [4]
    assert group.all_gather(b"x") == [b"x"]


def test_a_failed_torch_collective_is_named_with_the_backends_words(
    gloo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Connection closed by peer\n   [rank 1]   lost")

    monkeypatch.setattr(gloo, "all_reduce", fails)
    with pytest.raises(ArenaSyncError) as caught:
        TorchGroup(None).all_reduce_max([1])
    assert str(caught.value).startswith(
        "arena sync over the gloo group, rank 0 of 1, timeout 7.0 s: all_reduce(MAX) failed: "
        "Connection closed by peer [rank 1] lost. Every rank must call ws.sync(group)"
    )


def test_half_a_group_is_refused_as_none_of_the_kinds() -> None:
    class ReduceOnly:
        def all_reduce_max(self, values: list[int]) -> list[int]:
            return values

    class GatherOnly:
        def all_gather(self, data: bytes) -> list[bytes]:
            return [data]

    for half in (ReduceOnly(), GatherOnly()):
        with pytest.raises(ConfigError, match="group must be"):
            as_group(half)


class _SecondProcess:
    """``process_allgather`` of two JAX processes, this one rank ``rank``: each call
    stacks, in rank order, this process's array and the other's, which ``answers`` make
    from this one's (the other runs the same calls)."""

    def __init__(self, rank: int, answers: list[Callable[[np.ndarray], np.ndarray]]) -> None:
        self.rank = rank
        self.answers = answers
        self.threads: list[threading.Thread] = []

    def __call__(self, array: Any) -> Any:
        self.threads.append(threading.current_thread())
        own = np.asarray(array)
        other = self.answers.pop(0)(own)
        return np.stack([own, other] if self.rank == 0 else [other, own])


def _jax_group(
    monkeypatch: pytest.MonkeyPatch, gather: Any, timeout: float | None = 30.0
) -> JaxProcessGroup:
    jax = pytest.importorskip("jax")
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(multihost_utils, "process_allgather", gather)
    return JaxProcessGroup(timeout=timeout)


def _ints(values: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda own: np.array(values, dtype="<i8").view(np.uint8)


def test_jax_processes_take_the_elementwise_maximum_on_a_helper_daemon_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gather = _SecondProcess(1, [_ints([9, 3, -1, -(2**63)])])
    group = _jax_group(monkeypatch, gather)
    assert (group.rank, group.world) == (1, 2)
    assert group.describe() == "JAX processes, rank 1 of 2"
    assert group.all_reduce_max([5, -(2**63) + 1, 7, -(2**63)]) == [9, 3, 7, -(2**63)]
    (thread,) = gather.threads
    assert thread is not threading.current_thread()
    assert thread.name == "arena-jax-sync" and thread.daemon  # never holds the exit up


def test_jax_processes_gather_bytes_of_different_lengths_in_rank_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = b"hello, rank 1"

    def padded(own: np.ndarray) -> np.ndarray:
        row = np.zeros(len(own), dtype=np.uint8)
        row[: len(other)] = np.frombuffer(other, dtype=np.uint8)
        return row

    gather = _SecondProcess(1, [_ints([len(other)]), padded])
    group = _jax_group(monkeypatch, gather, timeout=None)
    assert group.all_gather(b"abc") == [other, b"abc"]
    assert gather.threads == [threading.current_thread()] * 2  # no timeout: no helper


def test_what_jax_raises_in_a_collective_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails(array: Any) -> Any:
        raise ValueError("process 0 is gone")

    group = _jax_group(monkeypatch, fails)
    with pytest.raises(ValueError, match="process 0 is gone"):
        group.all_reduce_max([1])


def test_a_jax_collective_that_never_answers_times_out_with_the_named_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def never(array: Any) -> Any:
        release.wait(60)
        return np.stack([array, array])

    group = _jax_group(monkeypatch, never, timeout=0.05)
    try:
        with pytest.raises(ArenaSyncError, match=r"did not finish within 0\.05 s"):
            group.all_reduce_max([1])
    finally:
        release.set()


def test_a_jax_group_made_without_a_timeout_waits_300_seconds_per_collective(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # planted49: the default timeout written 30.0 (the docstring says 300) passed
    # tests/distributed, whose JAX groups all pass their timeout. A join past the default
    # is what a collective that never answers would take: seen here through the join.
    jax = pytest.importorskip("jax")
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(multihost_utils, "process_allgather", _SecondProcess(0, [_ints([4])]))
    waits: list[float | None] = []
    join = threading.Thread.join

    def joined(self: threading.Thread, timeout: float | None = None) -> None:
        waits.append(timeout)
        join(self, timeout)

    group = JaxProcessGroup()
    monkeypatch.setattr(threading.Thread, "join", joined)
    assert group.all_reduce_max([7]) == [7]
    assert group.timeout == 300.0 and waits == [300.0]
