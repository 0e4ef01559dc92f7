"""Worker programs for tests/distributed/test_distributed.py and
tests/distributed/test_sync.py, run as separate processes.

``python tests/distributed/ranks.py torch RANK WORLD PORT``: one rank of a gloo process group
with its own process-wide arena; ``python tests/distributed/ranks.py jax``: one arena per JAX
device (run with ``--xla_force_host_platform_device_count=2``);
``python tests/distributed/ranks.py sync RANK WORLD PORT``: skewed warm-ups agreed by
``ws.sync()`` over gloo, then a rank that skips ``sync`` on a second group;
``python tests/distributed/ranks.py jaxsync RANK WORLD PORT``: the skewed warm-ups over
:class:`arena.distributed.JaxProcessGroup`. Each prints ``OK`` last; ``sync`` and
``jaxsync`` print a ``RESULT`` line of JSON before it; so do ``nccl`` (the skewed
warm-ups on CUDA arenas over NCCL, one GPU per rank) and ``cost`` (the timing of
docs/distributed.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

import arena
from arena import Allocation, HostSource


class RecordingSource(HostSource):
    """Host memory that remembers every block it hands out (to check view addresses)."""

    def __init__(self) -> None:
        self.blocks: list[Allocation] = []

    def allocate(self, nbytes: int) -> Allocation:
        block = super().allocate(nbytes)
        self.blocks.append(block)
        return block

    def holds(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` lies inside the newest block."""
        block = self.blocks[-1]
        return block.ptr <= address and address + nbytes <= block.ptr + block.nbytes


def torch_rank(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    source = RecordingSource()
    ws = arena.init_arena("cpu", source=source, framework="torch")
    assert arena.current_arena() is ws
    specs = (((3000,), "float32"), ((16, 8), "int64"), ((world, 5), "float32"))
    ws.torch.get_simultaneous(*specs)  # warm-up at the largest size
    ws.lock()
    for step in range(5):
        grad, counts, gathered = ws.torch.get_simultaneous(*specs)
        grad.fill_(rank + 1 + step)
        counts.fill_(rank)
        before = grad.data_ptr()
        dist.all_reduce(grad)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        row = torch.full((5,), float(rank * 10 + step))
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(gathered.view(-1), row)
        assert grad.data_ptr() == before
        for t in (grad, counts, gathered):
            assert source.holds(t.data_ptr(), t.numel() * t.element_size()), "not arena memory"
        # The collective wrote arena memory: the next request's views read its result.
        grad2, counts2, gathered2 = ws.torch.get_simultaneous(*specs)
        assert torch.all(grad2 == sum(r + 1 + step for r in range(world)))
        assert torch.all(counts2 == world - 1)
        expected = torch.tensor([[r * 10 + step] * 5 for r in range(world)], dtype=torch.float32)
        assert torch.equal(gathered2, expected)
    stats = ws.stats()
    assert stats.locked and stats.allocations == 1 and stats.allocations_while_locked == 0
    dist.barrier()
    dist.destroy_process_group()
    print("OK", rank)


def jax_devices() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    assert len(devices) == 2, devices
    sources = [RecordingSource() for _ in devices]
    arenas = [arena.Arena("cpu", source=s, framework="numpy") for s in sources]
    mesh = Mesh(np.array(devices), ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d"))
    step_fn = jax.jit(lambda x: x * 2.0 + jnp.sum(x))  # the sum is a cross-device reduction
    rows = 64
    for ws in arenas:  # warm-up, then lock every device's arena
        ws.numpy.get_simultaneous(((rows,), "float32"), ((rows,), "float32"))
        ws.lock()
    for step in range(5):
        shards = []
        outs = []
        for k, (ws, device) in enumerate(zip(arenas, devices, strict=True)):
            x, out = ws.numpy.get_simultaneous(((rows,), "float32"), ((rows,), "float32"))
            x[...] = np.arange(rows, dtype=np.float32) + 100 * k + step
            shard = jax.device_put(x, device, may_alias=True)  # zero-copy on CPU
            assert shard.unsafe_buffer_pointer() == x.ctypes.data
            shards.append(shard)
            outs.append(out)
        whole = jax.make_array_from_single_device_arrays((2 * rows,), sharding, shards)
        result = jax.block_until_ready(step_fn(whole))
        host = np.concatenate(
            [np.arange(rows, dtype=np.float32) + 100 * k + step for k in range(2)]
        )
        expected = host * 2.0 + host.sum()
        for k, (ws, out) in enumerate(zip(arenas, outs, strict=True)):
            piece = next(s.data for s in result.addressable_shards if s.device == devices[k])
            ws.numpy.write_into(out, piece)
            assert sources[k].holds(out.ctypes.data, out.nbytes)
            np.testing.assert_allclose(out, expected[k * rows : (k + 1) * rows], rtol=1e-6)
    for ws in arenas:
        stats = ws.stats()
        assert stats.locked and stats.allocations == 1 and stats.allocations_while_locked == 0
        ws.close()
    print("OK")


TOKENS = 32  # rank r warms up on (r + 1) * TOKENS tokens
MIB = 1 << 20


def _offsets(source: RecordingSource, pointers: list[int]) -> list[int]:
    """Each pointer's offset in the block that holds it."""
    found = []
    for p in pointers:
        block = next(b for b in reversed(source.blocks) if b.ptr <= p < b.ptr + b.nbytes)
        found.append(p - block.ptr)
    return found


def _warm_up(ws: arena.Arena, rank: int, world: int) -> None:
    """Rank r runs (r + 1) times the tokens of rank 0; rank 0 alone runs step
    ``"only-rank0"`` and asks for library workspace ``"lib-rank0"``."""
    from tests.stepping import layer

    tokens = TOKENS * (rank + 1)
    for ub in range(2):
        with ws.ubatch(ub):
            ws.get_simultaneous(((tokens * (ub + 1), 256), "float32"))
            layer(ws, tokens)  # records
            layer(ws, tokens)  # plans
    if rank == 0:
        with ws.ubatch(1):
            layer(ws, 16, key="only-rank0")
            layer(ws, 16, key="only-rank0")
        ws.get_library_workspace("lib-rank0", 12345)


def _worst_case(ws: arena.Arena, source: RecordingSource, world: int) -> dict[str, list[int]]:
    """Every rank runs the largest rank's sizes and rank 0's keys; the step offsets."""
    from tests.stepping import layer

    tokens = TOKENS * world
    offsets = {}
    for ub in range(2):
        with ws.ubatch(ub):
            ws.get_simultaneous(((tokens * (ub + 1), 256), "float32"))
            offsets[f"layer/{ub}"] = _offsets(source, layer(ws, tokens))
            offsets[f"only-rank0/{ub}"] = _offsets(source, layer(ws, 16, key="only-rank0"))
    ws.get_library_workspace("lib-rank0", 12345)
    return offsets


def _agree(ws: arena.Arena, source: RecordingSource, rank: int, world: int, group: Any) -> dict:
    """Warm up skewed, sync twice, lock with the group, run the worst case locked."""
    _warm_up(ws, rank, world)
    before = [s.capacity for s in ws.stats().slots]
    first = ws.sync(group)
    again = ws.sync(group)  # every rank has every key now: the probes agree
    ws.lock(group=group)
    allocations = ws.stats().allocations
    offsets = _worst_case(ws, source, world)
    stats = ws.stats()
    return {
        "rank": rank,
        "before": before,
        "after": list(first.after),
        "locked": [s.capacity for s in stats.slots],
        "offsets": offsets,
        "partial": list(first.partial),
        "not_taken": list(first.not_taken),
        "max_bytes": first.max_bytes,
        "schemas": [first.schemas, again.schemas],
        "payload": [first.payload_bytes, again.payload_bytes],
        "seconds": [first.seconds, again.seconds],
        "collectives": [first.collectives, again.collectives],
        "report_rank": [first.rank, first.world],
        "new_allocations": stats.allocations - allocations,
        "allocations_while_locked": stats.allocations_while_locked,
    }


def sync_rank(rank: int, world: int, port: int) -> None:
    import datetime
    import json
    import time

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    source = RecordingSource()
    ws = arena.Arena(
        "cpu", source=source, framework="numpy", ubatches=2, max_bytes=(rank + 1) * 64 * MIB
    )
    result = _agree(ws, source, rank, world, None)  # None: the default group
    # A second group with a short timeout, where the last rank never calls sync().
    short = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=2))
    if rank != world - 1:
        other = arena.Arena("cpu", framework="numpy")
        other.get_simultaneous(((100,), "float32"))
        start = time.monotonic()
        try:
            other.sync(short)
            result["skipped"] = "no error"
        except arena.ArenaSyncError as exc:
            result["skipped"] = str(exc)
        result["skipped_seconds"] = time.monotonic() - start
        other.close()
    dist.barrier()  # the default group still works for everyone
    ws.close()
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    print("OK", rank)
    sys.stdout.flush()
    os._exit(0)  # the broken second group must not hold the process at exit


def cost_rank(rank: int, world: int, port: int) -> None:
    """The cost of sync() for docs/distributed.md: the median of 30 syncs of fresh arenas
    where rank 0 has one key more (the probes differ) and of 30 where every rank has the
    same keys, after one warm-up sync of each."""
    import datetime
    import json
    import statistics

    import torch.distributed as dist

    from tests.stepping import layer

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    found: dict[str, Any] = {"rank": rank, "world": world}
    for case in ("differ", "same"):
        seconds, payload = [], 0
        for _ in range(31):
            with arena.Arena("cpu", framework="numpy", ubatches=2) as ws:
                for ub in range(2):
                    with ws.ubatch(ub):
                        layer(ws, TOKENS * (rank + 1))
                        layer(ws, TOKENS * (rank + 1))
                if case == "differ" and rank == 0:
                    ws.get_library_workspace("lib-rank0", 12345)
                dist.barrier()
                report = ws.sync()
                seconds.append(report.seconds)
                payload = report.payload_bytes
        found[case] = {
            "median_ms": round(1000 * statistics.median(seconds[1:]), 3),
            "payload_bytes": payload,
            "collectives": report.collectives,
        }
    dist.destroy_process_group()
    print("RESULT " + json.dumps(found))
    print("OK", rank)


def nccl_rank(rank: int, world: int, port: int) -> None:
    """The skewed warm-ups on CUDA arenas over NCCL (one GPU per rank)."""
    import datetime
    import json

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    ws = arena.Arena(f"cuda:{rank}", framework="torch", ubatches=2)
    offsets: list[list[int]] = []

    def run(tokens: int) -> None:
        offsets.clear()
        for ub in range(2):
            with ws.ubatch(ub):
                ws.get_simultaneous(((tokens * (ub + 1), 256), "float32"))
                with ws.step("layer") as st:
                    (x,) = st.get_simultaneous(((tokens, 64), "float32"))
                    (h,) = st.get_simultaneous(((tokens, 256), "float32"))
                    st.release(h)
                    (y,) = st.get_simultaneous(((tokens, 64), "float32"))
                    base = min(v.data_ptr() for v in (x, h, y))
                    offsets.append([v.data_ptr() - base for v in (x, h, y)])

    run(TOKENS * (rank + 1))
    run(TOKENS * (rank + 1))
    if rank == 0:
        ws.get_library_workspace("lib-rank0", 12345)
    before = [s.capacity for s in ws.stats().slots]
    report = ws.sync()
    ws.lock(group=dist.group.WORLD)
    allocations = ws.stats().allocations
    run(TOKENS * world)
    ws.get_library_workspace("lib-rank0", 12345)
    torch.cuda.synchronize()
    stats = ws.stats()
    result = {
        "rank": rank,
        "before": before,
        "locked": [s.capacity for s in stats.slots],
        "offsets": offsets,
        "partial": list(report.partial),
        "new_allocations": stats.allocations - allocations,
        "allocations_while_locked": stats.allocations_while_locked,
    }
    ws.close()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(result))
    print("OK", rank)


def jax_sync_rank(rank: int, world: int, port: int) -> None:
    import json
    import time

    import jax

    from arena.distributed import JaxProcessGroup

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=world,
        process_id=rank,
        initialization_timeout=60,
    )
    source = RecordingSource()
    ws = arena.Arena(
        "cpu", source=source, framework="numpy", ubatches=2, max_bytes=(rank + 1) * 64 * MIB
    )
    result = _agree(ws, source, rank, world, JaxProcessGroup())
    ws.close()
    # The last process never calls sync(): the others end with the named error after the
    # group's 3 s, then every process ends at once (JAX's helper thread stays blocked).
    if rank != world - 1:
        other = arena.Arena("cpu", framework="numpy")
        start = time.monotonic()
        try:
            other.sync(JaxProcessGroup(timeout=3.0))
            result["skipped"] = "no error"
        except arena.ArenaSyncError as exc:
            result["skipped"] = str(exc)
        result["skipped_seconds"] = time.monotonic() - start
    print("RESULT " + json.dumps(result))
    print("OK", rank)
    sys.stdout.flush()
    if rank == world - 1:
        # Alive until the others have ended, so they time out rather than see it gone:
        # the test closes this process's stdin once every other rank has exited. (A fixed
        # 6 s sleep raced them: a rank that took over 3 s more to reach its sync than this
        # one took to get here, as on a loaded machine, found this process gone.) JAX may
        # end this process first (SIGABRT) once the others have exited: by design, its
        # coordination service ends every process when one of them goes.
        sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        torch_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "sync":
        sync_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "nccl":
        nccl_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "cost":
        cost_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "jaxsync":
        jax_sync_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        jax_devices()
