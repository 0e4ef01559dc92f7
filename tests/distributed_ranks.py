"""Worker programs for tests/test_distributed.py, run as separate processes.

``python distributed_ranks.py torch RANK WORLD PORT``: one rank of a gloo process group
with its own process-wide arena; ``python distributed_ranks.py jax``: one arena per JAX
device (run with ``--xla_force_host_platform_device_count=2``). Both print ``OK`` last.
"""

from __future__ import annotations

import sys

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


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        torch_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        jax_devices()
