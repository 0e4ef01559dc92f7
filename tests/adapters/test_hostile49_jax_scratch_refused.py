"""``ws.jax.scratch_callback`` refused by JAX's ``buffer_callback`` (outputs without a shape
and dtype, aliases that are no dict) or given no sequence of scratch specs: nothing stays
behind. The scratch block was made first, so each refused call left its block allocated
in the slot, counted as a library workspace, until ``close()`` (9 refused calls of a
4 MiB scratch held 36 MiB); ``scratch=None`` raised ``tuple()``'s TypeError."""

from __future__ import annotations

from typing import Any

import pytest

import arena
from arena import SpecError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytest.importorskip("jax.experimental.buffer_callback")

SCRATCH = [((1 << 20,), "float32")]  # 4 MiB


def _fn(ctx: Any, out: Any, *inputs: Any, scratch: Any) -> None:
    pass


@pytest.mark.parametrize(
    "outputs, aliases",
    [(3, None), ("f32", None), (jax.ShapeDtypeStruct((4,), jnp.float32), [0])],
    ids=["an int", "a str", "aliases as a list"],
)
def test_a_callback_jax_refuses_leaves_no_scratch_block(outputs: Any, aliases: Any) -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        before = ws.stats()
        for _ in range(3):
            with pytest.raises((TypeError, AttributeError, ValueError)):
                ws.jax.scratch_callback(_fn, outputs, scratch=SCRATCH, input_output_aliases=aliases)
        after = ws.stats()
        assert after.slots[0].workspace_bytes == before.slots[0].workspace_bytes == 0
        assert after.live_bytes == before.live_bytes
        # A good one afterwards still gets its block.
        call = ws.jax.scratch_callback(
            _fn, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=SCRATCH
        )
        assert ws.stats().slots[0].workspace_bytes == 1 << 22
        assert call.views[0].shape == (1 << 20,)


@pytest.mark.parametrize("scratch", [None, 3])
def test_scratch_that_is_no_sequence_is_named(scratch: Any) -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        with pytest.raises(
            SpecError, match=r"scratch must be a sequence of \(shape, dtype\)"
        ) as info:
            ws.jax.scratch_callback(_fn, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=scratch)
        assert f"got {type(scratch).__name__} {scratch!r};" in str(info.value)  # Round 20
        assert ws.stats().live_bytes == 0


def test_the_scratch_views_are_laid_out_at_the_arenas_alignment() -> None:
    """Round 20: two scratch views of 64 bytes in an arena aligned to 1 KiB lie 1 KiB
    apart in a block of 2 KiB (at the default 256 bytes: 256 apart, 512 in all)."""
    with arena.Arena("cpu", framework="numpy", alignment=1024) as ws:
        call = ws.jax.scratch_callback(
            _fn, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((16,), "float32")] * 2
        )
        first, second = (view.__array_interface__["data"][0] for view in call.views)
        assert second - first == 1024
        assert ws.stats().slots[0].workspace_bytes == 2048


def test_the_scratch_block_is_named_as_the_callbacks_in_the_snapshot() -> None:
    """Round 20: its key is ``("jax.scratch_callback", n)``, exactly (a snapshot's reader
    finds the scratch of each callback by it)."""
    import re

    with arena.Arena("cpu", framework="numpy") as ws:
        ws.jax.scratch_callback(
            _fn, jax.ShapeDtypeStruct((4,), jnp.float32), scratch=[((16,), "float32")]
        )
        names = [
            frame["name"]
            for segment in ws.memory_snapshot()["segments"]
            for block in segment["blocks"]
            for frame in block["frames"]
        ]
        assert [n for n in names if re.search(r"workspace \('jax\.scratch_callback', \d+\)$", n)]
