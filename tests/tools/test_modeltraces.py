"""The model tracer (arena.tools.modeltraces) on two tiny models whose blocks are worked
out by hand: one block per storage a node creates, views and getitems no new block,
inputs and parameters none, outputs live to the end; and plan_offsets reaches LOAD."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from arena.planning import plan_offsets  # noqa: E402
from arena.tools import modeltraces  # noqa: E402


def _conv_net() -> nn.Module:
    with torch.device("meta"):
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 10)
        )


def test_conv_net_inference_blocks() -> None:
    """Batch 2 of 3x8x8 images, float32. The graph's steps: 0 convolution, 1 relu, 2 view
    (the flatten), 3 t (of the weight), 4 addmm, 5 output."""
    blocks = modeltraces.inference_blocks(_conv_net(), torch.empty(2, 3, 8, 8, device="meta"))
    assert blocks == [
        (2 * 4 * 8 * 8 * 4, 0, 1),  # the convolution's output, read by relu
        (2 * 4 * 8 * 8 * 4, 1, 4),  # relu's: its view (step 2) is read by addmm at 4
        (2 * 10 * 4, 4, 5),  # the logits, an output: to the last step
    ]  # the input, the weights and t(weight) (a view of one) give no block
    plan = plan_offsets(blocks)
    assert plan.total_bytes == plan.lower_bound


def test_conv_net_training_blocks() -> None:
    """A whole step: every gradient and the loss live to the last step, the batch and the
    parameters are no blocks, and the plan reaches LOAD."""
    blocks = modeltraces.training_blocks(
        _conv_net(),
        [torch.empty(2, 3, 8, 8, device="meta")],
        [torch.zeros(2, dtype=torch.long, device="meta")],
        torch.nn.functional.cross_entropy,
    )
    last = max(end for _, _, end in blocks)
    to_the_end = sorted(nbytes for nbytes, _, end in blocks if end == last)
    # The loss (4 bytes), the gradients of the biases (16, 40) and of the weights.
    assert to_the_end == [4, 4 * 4, 10 * 4, 4 * 3 * 3 * 3 * 4, 10 * 256 * 4]
    assert 2 * 3 * 8 * 8 * 4 not in {nbytes for nbytes, _, _ in blocks}  # the batch
    assert all(first <= end for _, first, end in blocks)
    plan = plan_offsets(blocks)
    assert plan.total_bytes == plan.lower_bound


def test_transformer_block_inference_blocks() -> None:
    """GPT-2's block at hidden 8, 2 heads, batch 1, 4 tokens, float32 (a [1, 4, 8] tensor
    is 128 bytes). The steps, by torch 2.13's aten ops: 0 layer norm (output, mean, rstd),
    1-3 their getitems, 4 view, 5 t, 6 addmm (q, k and v: [4, 24]), 7 view, 8 split,
    9-11 getitems, 12-17 view and transpose of q, k, v, 18 transpose of k, 19-22 expand and
    view of q and k, 23 bmm (scores: [2, 4, 4]), 24 view, 25 div, 26 ones (the mask, bool),
    27 tril, 28 not, 29 masked_fill, 30 softmax, 31-34 expand and view of the weights and
    v, 35 bmm, 36 view, 37 transpose, 38 clone (contiguous), 39-40 views, 41 t, 42 addmm
    (attention's projection), 43 view, 44 add (the residual), 45 layer norm, 46-48
    getitems, 49 view, 50 t, 51 addmm (the MLP's [4, 32]), 52 view, 53 gelu, 54 view, 55 t,
    56 addmm, 57 view, 58 add, 59 output. Dropout is off in eval mode."""
    with torch.device("meta"):
        block = modeltraces.GPT2Block(hidden=8, heads=2)
    blocks = modeltraces.inference_blocks(block, torch.empty(1, 4, 8, device="meta"))
    assert blocks == [
        (128, 0, 6),  # ln_1's output: viewed at 4, read by addmm at 6
        (16, 0, 2),  # its mean, [1, 4, 1]: picked by the getitem at 2, never read after
        (16, 0, 3),  # its rstd: picked at 3
        (4 * 24 * 4, 6, 35),  # q, k, v in one: v (a view of it) is read by the bmm at 35
        (2 * 4 * 4 * 4, 23, 25),  # the scores, viewed at 24, divided at 25
        (128, 25, 29),  # the scaled scores, masked at 29
        (16, 26, 27),  # ones(4, 4) of bool
        (16, 27, 28),  # its tril
        (16, 28, 29),  # its negation, read by masked_fill
        (128, 29, 30),  # the masked scores
        (128, 30, 35),  # the softmax, read (through views) by the bmm at 35
        (128, 35, 38),  # weights @ v, transposed at 37 and copied at 38
        (128, 38, 42),  # the copy, viewed at 39 and 40, read by the projection at 42
        (128, 42, 44),  # the projection, viewed at 43, added at 44
        (128, 44, 58),  # the residual stream: ln_2 at 45, the last add at 58
        (128, 45, 51),  # ln_2's output, read by the MLP's addmm at 51
        (16, 45, 47),  # its mean
        (16, 45, 48),  # its rstd
        (4 * 32 * 4, 51, 53),  # c_fc's output, viewed at 52, read by gelu at 53
        (4 * 32 * 4, 53, 56),  # gelu's, read by the projection at 56
        (128, 56, 58),  # the MLP's projection, added at 58
        (128, 58, 59),  # the block's output: to the last step
    ]
    plan = plan_offsets(blocks)
    assert plan.total_bytes == plan.lower_bound


def test_transformer_block_training_reaches_load(tmp_path: Path) -> None:
    """A training step of the block, as a layer inside a model: the output's gradient given,
    the input's gradient returned beside the parameters'; it goes through the CSV form
    unchanged and plans at LOAD."""
    with torch.device("meta"):
        block = modeltraces.GPT2Block(hidden=8, heads=2)
    x = torch.empty(1, 4, 8, device="meta")
    blocks = modeltraces.training_blocks(block, [x], [torch.empty_like(x)], None, (0,))
    last = max(end for _, _, end in blocks)
    # The output, the input's gradient and the twelve parameters' live to the end.
    assert len([1 for _, _, end in blocks if end == last]) == 2 + 12
    path = tmp_path / "block.csv"
    modeltraces.write_csv(path, blocks)
    assert path.read_text().splitlines()[0] == "id,lower,upper,size"
    assert modeltraces.read_csv(path) == blocks
    plan = plan_offsets(blocks)
    assert plan.total_bytes == plan.lower_bound
