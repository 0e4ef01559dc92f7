"""The groups :meth:`arena.Arena.sync` runs over: two collectives, any engine.

:meth:`~arena.Arena.sync` needs two collectives of a group of ranks, and nothing else:

* ``all_reduce_max(values: list[int]) -> list[int]``: the elementwise maximum over the
  ranks of equally long lists of signed 64-bit ints;
* ``all_gather(data: bytes) -> list[bytes]``: every rank's bytes, in rank order (the
  lengths may differ).

Any object with these two methods is a group (:class:`SyncGroup`); one that also has
``rank`` and ``world`` attributes gets them named in the report. :class:`TorchGroup` wraps
a ``torch.distributed`` process group (gloo on the host, NCCL on CUDA devices) and
:class:`JaxProcessGroup` the processes of ``jax.distributed``. Neither imports its framework
before it is made: ``import arena`` imports no framework.
"""

from __future__ import annotations

import sys
import threading
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from arena.errors import ArenaSyncError, ConfigError

__all__ = ["JaxProcessGroup", "SyncGroup", "TorchGroup", "as_group"]


@runtime_checkable
class SyncGroup(Protocol):
    """What :meth:`arena.Arena.sync` needs of a group of ranks (see the module's text)."""

    def all_reduce_max(self, values: list[int]) -> list[int]:
        """The elementwise maximum of every rank's ``values`` (all ranks pass equally
        many signed 64-bit ints)."""
        ...

    def all_gather(self, data: bytes) -> list[bytes]:
        """Every rank's ``data``, in rank order."""
        ...


class TorchGroup:
    """A ``torch.distributed`` process group as a :class:`SyncGroup`.

    Ints travel as one ``int64`` tensor reduced with ``ReduceOp.MAX`` (on the current
    CUDA device for NCCL, on the host otherwise). Every collective waits at most the
    group's timeout (``init_process_group(timeout=...)``); on gloo a
    ``monitored_barrier`` opens the exchange, so a rank that never joins is named.

    Parameters
    ----------
    group : torch.distributed.ProcessGroup or None
        The group; None for the default (world) group, which must be initialised.
    """

    def __init__(self, group: Any = None) -> None:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(
                "sync() with group=None uses torch.distributed's default process group, "
                "but none is initialised: call torch.distributed.init_process_group(...) "
                "first, or pass a group object (see docs/distributed.md)"
            )
        self._dist = dist
        self._torch = torch
        self.group = group
        self.backend = str(dist.get_backend(group))
        self.rank = int(dist.get_rank(group))
        self.world = int(dist.get_world_size(group))
        if self.backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.timeout = _group_timeout(dist, group, self.device)

    def describe(self) -> str:
        """``"gloo group, rank 0 of 4, timeout 3.0 s"``, for messages."""
        wait = "the backend's timeout" if self.timeout is None else f"timeout {self.seconds} s"
        return f"{self.backend} group, rank {self.rank} of {self.world}, {wait}"

    @property
    def seconds(self) -> float | None:
        """The group's timeout in seconds (None where torch does not say)."""
        return None if self.timeout is None else self.timeout.total_seconds()

    def enter(self) -> None:
        """Wait until every rank has joined (gloo only: other backends have no monitored
        barrier, and their first collective waits instead)."""
        if self.backend != "gloo":
            return
        self._run(
            lambda: self._dist.monitored_barrier(
                self.group, timeout=self.timeout, wait_all_ranks=True
            ),
            "waiting for every rank to join",
        )

    def all_reduce_max(self, values: list[int]) -> list[int]:
        """See :class:`SyncGroup`."""
        torch, dist = self._torch, self._dist
        tensor = torch.tensor(values, dtype=torch.int64, device=self.device)
        self._wait(
            lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True),
            "all_reduce(MAX)",
        )
        return [int(v) for v in tensor.cpu().tolist()]

    def all_gather(self, data: bytes) -> list[bytes]:
        """See :class:`SyncGroup`: the lengths first, then the bytes padded to the longest."""
        torch, dist = self._torch, self._dist
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        sizes = [torch.empty_like(size) for _ in range(self.world)]
        self._wait(
            lambda: dist.all_gather(sizes, size, group=self.group, async_op=True), "all_gather"
        )
        lengths = [int(s.item()) for s in sizes]
        longest = max(lengths, default=0)
        padded = torch.zeros(max(longest, 1), dtype=torch.uint8)
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else 0
        padded = padded.to(self.device)
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        self._wait(
            lambda: dist.all_gather(parts, padded, group=self.group, async_op=True), "all_gather"
        )
        return [bytes(p.cpu().numpy()[:n].tobytes()) for p, n in zip(parts, lengths, strict=True)]

    def _wait(self, start: Any, what: str) -> None:
        def run() -> None:
            work = start()
            if self.timeout is None:
                work.wait()
            else:
                work.wait(self.timeout)

        self._run(run, what)

    def _run(self, call: Any, what: str) -> None:
        try:
            call()
        except RuntimeError as exc:  # gloo and NCCL raise RuntimeError (DistBackendError)
            raise ArenaSyncError(
                f"arena sync over the {self.describe()}: {what} failed: "
                f"{' '.join(str(exc).split())[:600]}. Every rank must call ws.sync(group) "
                "(or ws.lock(group=...)) at the same point, after its warm-up"
            ) from exc


def _group_timeout(dist: Any, group: Any, device: Any) -> timedelta | None:
    """The timeout the group was made with: torch keeps it on the backend's options and
    has no public getter, so this reads it there and falls back to None (the
    collectives then use it themselves; a monitored barrier uses torch's default)."""
    try:
        pg = group if group is not None else dist.group.WORLD
        timeout = pg._get_backend(device).options._timeout
    except Exception:  # another torch: the backend's own timeout applies
        return None
    return timeout if isinstance(timeout, timedelta) else None


class JaxProcessGroup:
    """The processes of ``jax.distributed`` (one arena per process) as a
    :class:`SyncGroup`, over ``jax.experimental.multihost_utils.process_allgather``.

    Call it after ``jax.distributed.initialize(...)``. JAX has no cross-process maximum
    outside a compiled computation, and without ``jax_enable_x64`` its arrays hold 32-bit
    ints: so ints travel as their 8 bytes and every process takes the maximum of the
    gathered rows itself (bytes on the wire: ranks x ints x 8).

    JAX's collectives wait for a process that never comes without end (measured on CPU
    with gloo: still waiting after 150 s), so each one runs on a helper thread and
    ``timeout`` seconds without an answer raise :class:`~arena.ArenaSyncError`. The
    helper thread stays blocked in JAX: end the process after that error.

    Parameters
    ----------
    timeout : float or None, optional
        Seconds each collective may take (default 300); None waits as long as JAX does.
    """

    def __init__(self, timeout: float | None = 300.0) -> None:
        import jax
        from jax.experimental import multihost_utils

        self._gather_now = multihost_utils.process_allgather
        self.rank = int(jax.process_index())
        self.world = int(jax.process_count())
        self.timeout = timeout

    def describe(self) -> str:
        """``"JAX processes, rank 0 of 2"``, for messages."""
        return f"JAX processes, rank {self.rank} of {self.world}"

    def _gather(self, array: Any) -> Any:
        if self.timeout is None:
            return self._gather_now(array)
        done: list[Any] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                done.append(self._gather_now(array))
            except BaseException as exc:  # handed to the caller's thread
                failed.append(exc)

        worker = threading.Thread(target=run, name="arena-jax-sync", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if failed:
            raise failed[0]
        if not done:
            raise ArenaSyncError(
                f"arena sync over the {self.describe()}: process_allgather did not finish "
                f"within {self.timeout} s: a process did not call ws.sync(group) (or "
                "ws.lock(group=...)) at the same point. JAX keeps waiting on a helper "
                "thread: end this process"
            )
        return done[0]

    def all_reduce_max(self, values: list[int]) -> list[int]:
        """See :class:`SyncGroup`."""
        import numpy as np

        raw = np.array(values, dtype="<i8").view(np.uint8)
        rows = np.asarray(self._gather(raw)).reshape(self.world, -1)
        ints = rows.copy().view("<i8")
        return [int(v) for v in ints.max(axis=0)] if len(values) else []

    def all_gather(self, data: bytes) -> list[bytes]:
        """See :class:`SyncGroup`: the lengths first, then the bytes padded to the longest."""
        import numpy as np

        raw = np.array([len(data)], dtype="<i8").view(np.uint8)
        sizes = [
            int(v)
            for v in np.asarray(self._gather(raw)).reshape(self.world, -1).copy().view("<i8")[:, 0]
        ]
        padded = np.zeros(max(*sizes, 1), dtype=np.uint8)
        padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        rows = np.asarray(self._gather(padded)).reshape(self.world, -1)
        return [rows[r, :n].tobytes() for r, n in enumerate(sizes)]


def as_group(group: Any) -> Any:
    """The :class:`SyncGroup` for ``group``: an object with both collectives as it is, a
    ``torch.distributed`` process group (or None: the default one) wrapped in
    :class:`TorchGroup`.

    Raises
    ------
    ConfigError
        ``group`` is none of these.
    """
    if callable(getattr(group, "all_reduce_max", None)) and callable(
        getattr(group, "all_gather", None)
    ):
        return group
    dist = sys.modules.get("torch.distributed")
    if group is None:
        if dist is None:
            raise ConfigError(
                "sync() with group=None uses torch.distributed's default process group, "
                "but torch.distributed is not imported: initialise it first, or pass a "
                "group object with all_reduce_max() and all_gather() (docs/distributed.md)"
            )
        return TorchGroup(None)
    if dist is not None and isinstance(group, dist.ProcessGroup):
        return TorchGroup(group)
    raise ConfigError(
        f"group must be a torch.distributed process group, None (the default group) or an "
        f"object with all_reduce_max(list[int]) and all_gather(bytes), got {group!r}"
    )
