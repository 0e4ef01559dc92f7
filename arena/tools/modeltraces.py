"""Real model traces for the offset planner: torch.fx graphs of CNNs and transformers.

``python -m arena.tools.modeltraces DIR`` traces eight models written here in plain torch
(no torchvision), each for inference and for a whole training step, at batch 1 and 8, and
writes one CSV per trace to ``DIR`` in MiniMalloc's format (``id,lower,upper,size``,
half-open lifetimes: a block lives from step ``lower`` to ``upper - 1``). With ``--plan``
it then plans every CSV in ``DIR`` with :func:`~arena.planning.plan_offsets`, without a
limit and with ``--time-limit`` (default 10 s), and prints the totals against LOAD.

This module needs torch (``pip install torch``); ``import arena`` never imports it.

How a graph becomes blocks (:func:`graph_blocks`):

* The models are built on the ``meta`` device and traced by
  :func:`torch.fx.experimental.proxy_tensor.make_fx` in fake mode, so no arithmetic runs
  and no weight is allocated. Inference is the forward pass under ``torch.no_grad()`` in
  eval mode; training is one whole step in train mode (forward, loss, and
  ``torch.autograd.grad`` of the loss with respect to every parameter), so every
  intermediate of the backward pass is a node of the graph too.
* Steps are the graph's nodes in order, the placeholders (inputs) left out: step 0 is
  the first operation, the last step the output node. Each tensor storage a node
  creates is one block of the storage's bytes, from that node to the last node that uses
  a tensor on that storage. Aliasing is read off the storages, not guessed from op
  names: a view, a ``detach``, an in-place op or a ``getitem`` of a multi-output node
  returns a tensor on a storage seen before, which is no new block but extends that
  block's life to its own last use. A ``getitem`` of a multi-output node uses only the
  output it picks.
* Storages of the graph's inputs (parameters, buffers, the batch) are not scratch and
  give no block, nor do their views, nor in-place updates of them (batch norm's running
  statistics). Storages of the outputs (the logits, or the loss and the gradients) live
  to the graph's last step. Storages of zero bytes give no block.
"""

from __future__ import annotations

import argparse
import csv
import math
import operator
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef

from arena.planning import plan_offsets

__all__ = [
    "MODELS",
    "Trace",
    "graph_blocks",
    "inference_blocks",
    "main",
    "model_traces",
    "read_csv",
    "training_blocks",
    "write_csv",
]

#: A block: (bytes, first step, last step), both steps inclusive (plan_offsets' form).
Block = tuple[int, int, int]


# ---------------------------------------------------------------------- tracing


def _tensors(value: object) -> Iterable[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _storage(tensor: Tensor) -> StorageWeakRef:
    """The identity of ``tensor``'s storage, shared by its views and aliases."""
    return StorageWeakRef(tensor.untyped_storage())  # type: ignore[no-untyped-call]


def graph_blocks(graph: torch.fx.Graph) -> list[Block]:
    """The blocks of a traced graph: one per storage a node creates.

    Parameters
    ----------
    graph
        A graph from ``make_fx``, whose nodes carry their (fake) values in
        ``node.meta["val"]``.

    Returns
    -------
    list of (int, int, int)
        ``(nbytes, first, last)`` per storage created by a node, in order of creation:
        ``first`` the step of the creating node, ``last`` that of the last node using a
        tensor on the storage (the output node's step for the graph's outputs); steps
        count the nodes that are not placeholders, from 0.
    """
    storages: dict[str, list[StorageWeakRef]] = {}
    inputs: set[StorageWeakRef] = set()
    blocks: dict[StorageWeakRef, list[int]] = {}  # storage -> [nbytes, first, last]
    index = -1
    for node in graph.nodes:
        index += node.op != "placeholder"
        mine = [_storage(tensor) for tensor in _tensors(node.meta.get("val"))]
        storages[node.name] = mine
        # A getitem uses the one output it picks (its own value), not all of them.
        used = [] if node.target is operator.getitem else node.all_input_nodes
        for user_of in used:
            for ref in storages[user_of.name]:
                if ref in blocks:
                    blocks[ref][2] = index
        for ref, tensor in zip(mine, _tensors(node.meta.get("val")), strict=True):
            if node.op == "placeholder":
                inputs.add(ref)
            elif ref in blocks:
                blocks[ref][2] = index  # an alias made here keeps the storage live here
            elif ref not in inputs and tensor.untyped_storage().nbytes() > 0:
                blocks[ref] = [tensor.untyped_storage().nbytes(), index, index]
    # The output node is the last: what it returns is used there, so lives to the end.
    return [(nbytes, first, end) for nbytes, first, end in blocks.values()]


def _meta_copy(tensor: Tensor, grad: bool) -> Tensor:
    return torch.empty_like(tensor, device="meta").requires_grad_(grad)


def inference_blocks(model: nn.Module, *inputs: Tensor) -> list[Block]:
    """The blocks of ``model``'s forward pass under ``torch.no_grad()``, in eval mode.

    Parameters
    ----------
    model
        A module on the ``meta`` device.
    *inputs
        Its inputs, on the ``meta`` device (not blocks).

    Returns
    -------
    list of (int, int, int)
        :func:`graph_blocks` of the traced forward pass.
    """
    model.eval()
    params = {name: _meta_copy(p, False) for name, p in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def forward(params: dict[str, Tensor], buffers: dict[str, Tensor], *xs: Tensor) -> Any:
        with torch.no_grad():
            return functional_call(model, (params, buffers), xs)

    graph = make_fx(forward, tracing_mode="fake")(params, buffers, *inputs)
    return graph_blocks(graph.graph)


def training_blocks(
    model: nn.Module,
    inputs: Sequence[Tensor],
    targets: Sequence[Tensor],
    loss: Callable[..., Tensor] | None,
    input_grads: Sequence[int] = (),
) -> list[Block]:
    """The blocks of one whole training step of ``model``, in train mode.

    Parameters
    ----------
    model
        A module on the ``meta`` device.
    inputs
        Its inputs, on the ``meta`` device (not blocks).
    targets
        What the loss reads besides the model's output, on the ``meta`` device (not
        blocks); with ``loss=None``, the one gradient of the model's output.
    loss
        ``loss(output, *targets)``: the scalar differentiated; ``None`` to differentiate
        the output itself against ``targets[0]`` (a layer inside a model, which the layer
        above hands the gradient of its output).
    input_grads
        Indices of ``inputs`` whose gradients the step also returns (a layer inside a
        model passes a gradient down to the layer below).

    Returns
    -------
    list of (int, int, int)
        :func:`graph_blocks` of the traced step, which returns the loss (or the output)
        and the gradients of every parameter and of ``input_grads``.
    """
    model.train()
    params = {name: _meta_copy(p, True) for name, p in model.named_parameters()}
    buffers = dict(model.named_buffers())
    xs = [_meta_copy(x, True) if i in input_grads else x for i, x in enumerate(inputs)]

    def step(
        params: dict[str, Tensor], buffers: dict[str, Tensor], xs: list[Tensor], ts: list[Tensor]
    ) -> Any:
        out = functional_call(model, (params, buffers), tuple(xs))
        value = out if loss is None else loss(out, *ts)
        wrt = [*params.values(), *(xs[i] for i in input_grads)]
        grad_output = ts[0] if loss is None else None
        grads = torch.autograd.grad(value, wrt, grad_output, allow_unused=True)
        return value, grads  # None for the parameters left unused (Inception's aux at batch 1)

    graph = make_fx(step, tracing_mode="fake")(params, buffers, xs, list(targets))
    return graph_blocks(graph.graph)


# ---------------------------------------------------------------------- CNNs


class ConvBN(nn.Sequential):
    """Convolution without bias, batch norm, then ``act`` (none for ``None``)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int | tuple[int, int],
        stride: int = 1,
        padding: int | tuple[int, int] | None = None,
        *,
        groups: int = 1,
        act: type[nn.Module] | None = nn.ReLU,
        eps: float = 1e-5,
    ) -> None:
        if padding is None:
            padding = (kernel - 1) // 2 if isinstance(kernel, int) else (0, 0)
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(cout, eps=eps),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class BasicBlock(nn.Module):
    """ResNet-18's block: two 3x3 convolutions and the shortcut."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = ConvBN(cin, width, 3, stride)
        self.conv2 = ConvBN(width, width, 3, act=None)
        self.down = _shortcut(cin, width * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv2(self.conv1(x)) + self.down(x))


class Bottleneck(nn.Module):
    """ResNet-50's block (v1.5, torchvision's: the stride on the 3x3 convolution)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = ConvBN(cin, width, 1)
        self.conv2 = ConvBN(width, width, 3, stride)
        self.conv3 = ConvBN(width, width * self.expansion, 1, act=None)
        self.down = _shortcut(cin, width * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv3(self.conv2(self.conv1(x))) + self.down(x))


def _pooled_linear(fc: nn.Module, features: Tensor) -> Tensor:
    """A classifier head: global average pooling, flatten, ``fc``."""
    out: Tensor = fc(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1))
    return out


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return ConvBN(cin, cout, 1, stride, act=None)


class ResNet(nn.Module):
    """torchvision's ResNet-18 (``BasicBlock``, 2-2-2-2) or ResNet-50 (``Bottleneck``,
    3-4-6-3), 1000 classes."""

    def __init__(self, block: type[BasicBlock | Bottleneck], counts: Sequence[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBN(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for stage, count in enumerate(counts):
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(block(cin, 64 << stage, stride))
                cin = (64 << stage) * block.expansion
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: Tensor) -> Tensor:
        return _pooled_linear(self.fc, self.features(x))


class MobileNetV1(nn.Module):
    """MobileNet v1 (Howard et al., 2017), width 1.0: depthwise-separable convolutions."""

    def __init__(self) -> None:
        super().__init__()
        plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
        plan += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
        layers: list[nn.Module] = [ConvBN(3, 32, 3, 2)]
        cin = 32
        for cout, stride in plan:
            layers += [ConvBN(cin, cin, 3, stride, groups=cin), ConvBN(cin, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1024, 1000)

    def forward(self, x: Tensor) -> Tensor:
        return _pooled_linear(self.fc, self.features(x))


def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class SqueezeExcite(nn.Module):
    """MobileNet v3's squeeze-and-excitation: pool, 1x1 down, ReLU, 1x1 up, hardsigmoid."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _divisible(channels // 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        scale = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return x * scale


#: An inverted residual block: input channels, kernel, expanded channels, output channels,
#: squeeze-excite or not, the activation, the stride.
_Setting = tuple[int, int, int, int, bool, type[nn.Module], int]


class InvertedResidual(nn.Module):
    """MobileNet v2 and v3's block: 1x1 expansion, depthwise, (squeeze-excite,) 1x1
    projection, and the shortcut where shapes allow."""

    def __init__(self, setting: _Setting, eps: float) -> None:
        super().__init__()
        cin, kernel, expanded, cout, se, act, stride = setting
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBN(cin, expanded, 1, act=act, eps=eps))
        layers.append(ConvBN(expanded, expanded, kernel, stride, groups=expanded, act=act, eps=eps))
        if se:
            layers.append(SqueezeExcite(expanded))
        layers.append(ConvBN(expanded, cout, 1, act=None, eps=eps))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.block(x)
        return out + x if self.residual else out


class MobileNetV2(nn.Module):
    """torchvision's MobileNet v2, width 1.0, 1000 classes."""

    def __init__(self) -> None:
        super().__init__()
        settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2)]
        settings += [(6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
        layers: list[nn.Module] = [ConvBN(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for expand, cout, count, stride in settings:
            for index in range(count):
                first = stride if index == 0 else 1
                setting = (cin, 3, cin * expand, cout, False, nn.ReLU6, first)
                layers.append(InvertedResidual(setting, 1e-5))
                cin = cout
        layers.append(ConvBN(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

    def forward(self, x: Tensor) -> Tensor:
        pooled = F.adaptive_avg_pool2d(self.features(x), 1)
        out: Tensor = self.classifier(torch.flatten(pooled, 1))
        return out


class MobileNetV3(nn.Module):
    """torchvision's MobileNet v3 large, width 1.0, 1000 classes."""

    def __init__(self) -> None:
        super().__init__()
        relu, hswish = nn.ReLU, nn.Hardswish
        settings: list[_Setting] = [
            (16, 3, 16, 16, False, relu, 1),
            (16, 3, 64, 24, False, relu, 2),
            (24, 3, 72, 24, False, relu, 1),
            (24, 5, 72, 40, True, relu, 2),
            (40, 5, 120, 40, True, relu, 1),
            (40, 5, 120, 40, True, relu, 1),
            (40, 3, 240, 80, False, hswish, 2),
            (80, 3, 200, 80, False, hswish, 1),
            (80, 3, 184, 80, False, hswish, 1),
            (80, 3, 184, 80, False, hswish, 1),
            (80, 3, 480, 112, True, hswish, 1),
            (112, 3, 672, 112, True, hswish, 1),
            (112, 5, 672, 160, True, hswish, 2),
            (160, 5, 960, 160, True, hswish, 1),
            (160, 5, 960, 160, True, hswish, 1),
        ]
        layers: list[nn.Module] = [ConvBN(3, 16, 3, 2, act=hswish, eps=1e-3)]
        layers += [InvertedResidual(setting, 1e-3) for setting in settings]
        layers.append(ConvBN(160, 960, 1, act=hswish, eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, 1000)
        )

    def forward(self, x: Tensor) -> Tensor:
        pooled = F.adaptive_avg_pool2d(self.features(x), 1)
        out: Tensor = self.classifier(torch.flatten(pooled, 1))
        return out


def _conv(
    cin: int,
    cout: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
) -> ConvBN:
    """Inception v3's ``BasicConv2d``: convolution, batch norm (eps 0.001), ReLU."""
    return ConvBN(cin, cout, kernel, stride, padding, eps=1e-3)


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int) -> None:
        super().__init__()
        self.b1 = _conv(cin, 64, 1)
        self.b5 = nn.Sequential(_conv(cin, 48, 1), _conv(48, 64, 5, padding=2))
        self.b3 = nn.Sequential(
            _conv(cin, 64, 1), _conv(64, 96, 3, padding=1), _conv(96, 96, 3, padding=1)
        )
        self.pool = _conv(cin, pool, 1)

    def forward(self, x: Tensor) -> Tensor:
        pooled = self.pool(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), pooled], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = _conv(cin, 384, 3, 2)
        self.dbl = nn.Sequential(
            _conv(cin, 64, 1), _conv(64, 96, 3, padding=1), _conv(96, 96, 3, 2)
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.dbl(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.b1 = _conv(cin, 192, 1)
        self.b7 = nn.Sequential(
            _conv(cin, c7, 1),
            _conv(c7, c7, (1, 7), padding=(0, 3)),
            _conv(c7, 192, (7, 1), padding=(3, 0)),
        )
        self.dbl = nn.Sequential(
            _conv(cin, c7, 1),
            _conv(c7, c7, (7, 1), padding=(3, 0)),
            _conv(c7, c7, (1, 7), padding=(0, 3)),
            _conv(c7, c7, (7, 1), padding=(3, 0)),
            _conv(c7, 192, (1, 7), padding=(0, 3)),
        )
        self.pool = _conv(cin, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        pooled = self.pool(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b7(x), self.dbl(x), pooled], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = nn.Sequential(_conv(cin, 192, 1), _conv(192, 320, 3, 2))
        self.b7 = nn.Sequential(
            _conv(cin, 192, 1),
            _conv(192, 192, (1, 7), padding=(0, 3)),
            _conv(192, 192, (7, 1), padding=(3, 0)),
            _conv(192, 192, 3, 2),
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b1 = _conv(cin, 320, 1)
        self.b3 = _conv(cin, 384, 1)
        self.b3a = _conv(384, 384, (1, 3), padding=(0, 1))
        self.b3b = _conv(384, 384, (3, 1), padding=(1, 0))
        self.dbl = nn.Sequential(_conv(cin, 448, 1), _conv(448, 384, 3, padding=1))
        self.dbla = _conv(384, 384, (1, 3), padding=(0, 1))
        self.dblb = _conv(384, 384, (3, 1), padding=(1, 0))
        self.pool = _conv(cin, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        b3 = self.b3(x)
        dbl = self.dbl(x)
        pooled = self.pool(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat(
            [
                self.b1(x),
                torch.cat([self.b3a(b3), self.b3b(b3)], 1),
                torch.cat([self.dbla(dbl), self.dblb(dbl)], 1),
                pooled,
            ],
            1,
        )


class InceptionAux(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.conv0 = _conv(cin, 128, 1)
        self.conv1 = _conv(128, 768, 5)
        self.fc = nn.Linear(768, 1000)

    def forward(self, x: Tensor) -> Tensor:
        return _pooled_linear(self.fc, self.conv1(self.conv0(F.avg_pool2d(x, 5, 3))))


class InceptionV3(nn.Module):
    """torchvision's Inception v3 (299x299 inputs), with the auxiliary classifier in
    training (its logits returned beside the main ones, as torchvision's train mode does)
    at batches above 1."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv(3, 32, 3, 2),
            _conv(32, 32, 3),
            _conv(32, 64, 3, padding=1),
            nn.MaxPool2d(3, 2),
            _conv(64, 80, 1),
            _conv(80, 192, 3),
            nn.MaxPool2d(3, 2),
            InceptionA(192, 32),
            InceptionA(256, 64),
            InceptionA(288, 64),
            InceptionB(288),
            InceptionC(768, 128),
            InceptionC(768, 160),
            InceptionC(768, 160),
            InceptionC(768, 192),
        )
        self.aux = InceptionAux(768)
        self.head = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        x = self.stem(x)
        # Batch norm cannot train on one value per channel, which the auxiliary
        # classifier's 1x1 map is at batch 1: there the step trains without it (as
        # torchvision's aux_logits=False does).
        aux = self.aux(x) if self.training and x.shape[0] > 1 else None
        x = F.dropout(torch.flatten(F.adaptive_avg_pool2d(self.head(x), 1), 1), 0.5, self.training)
        logits: Tensor = self.fc(x)
        return logits if aux is None else (logits, aux)


# ---------------------------------------------------------------------- transformers


class GPT2Block(nn.Module):
    """GPT-2's block: pre-norm causal attention (eager: scores, mask, softmax) and a GELU
    MLP, with dropout 0.1 on the attention weights and both residual branches."""

    def __init__(self, hidden: int = 768, heads: int = 12) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.attn_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = (
            t.view(batch, tokens, self.heads, -1).transpose(1, 2)
            for t in self.c_attn(self.ln_1(x)).split(hidden, 2)
        )
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        causal = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        weights = F.dropout(scores.softmax(-1), 0.1, self.training)
        attn = (weights @ v).transpose(1, 2).reshape(batch, tokens, hidden)
        x = x + F.dropout(self.attn_proj(attn), 0.1, self.training)
        mlp = self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + F.dropout(mlp, 0.1, self.training)


class GPT2(nn.Module):
    """GPT-2 small: 12 blocks of hidden 768, 12 heads, vocabulary 50257, the language-model
    head tied to the token embedding; returns the logits of every position."""

    def __init__(self, layers: int = 12, hidden: int = 768, vocab: int = 50257) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(1024, hidden)
        self.blocks = nn.Sequential(*(GPT2Block(hidden) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids: Tensor) -> Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = F.dropout(self.wte(ids) + self.wpe(positions), 0.1, self.training)
        return F.linear(self.ln_f(self.blocks(x)), self.wte.weight)


class RMSNorm(nn.Module):
    """Llama's RMSNorm: computed in float32, the result cast back, then scaled."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: Tensor) -> Tensor:
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * wide.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


class LlamaLayer(nn.Module):
    """One Llama-3-8B decoder layer as Hugging Face's eager implementation runs it: hidden
    4096, 32 query and 8 KV heads of 128 (KV heads repeated), rotary embeddings (``cos``
    and ``sin`` given, as the model hands them to every layer), the causal mask given,
    softmax in float32, a gated SiLU MLP of 14336."""

    def __init__(
        self, hidden: int = 4096, heads: int = 32, kv_heads: int = 8, intermediate: int = 14336
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.input_layernorm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def _heads(self, x: Tensor, count: int) -> Tensor:
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, count, self.dim).transpose(1, 2)

    def _repeat(self, x: Tensor) -> Tensor:
        batch, kv, tokens, dim = x.shape
        groups = self.heads // kv
        x = x[:, :, None].expand(batch, kv, groups, tokens, dim)
        return x.reshape(batch, kv * groups, tokens, dim)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        batch, tokens, hidden = x.shape
        normed = self.input_layernorm(x)
        q = _rotate(self._heads(self.q_proj(normed), self.heads), cos, sin)
        k = _rotate(self._heads(self.k_proj(normed), self.kv_heads), cos, sin)
        v = self._heads(self.v_proj(normed), self.kv_heads)
        k, v = self._repeat(k), self._repeat(v)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.dim) + mask
        weights = scores.softmax(-1, dtype=torch.float32).to(q.dtype)
        attn = (weights @ v).transpose(1, 2).reshape(batch, tokens, hidden)
        x = x + self.o_proj(attn)
        normed = self.post_attention_layernorm(x)
        mlp: Tensor = self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
        return x + mlp


# ---------------------------------------------------------------------- the traces


@dataclass(frozen=True)
class _Model:
    """How to build a model and its inputs for a batch."""

    build: Callable[[], nn.Module]
    inputs: Callable[[int], list[Tensor]]
    targets: Callable[[int], list[Tensor]]
    loss: Callable[..., Tensor] | None
    input_grads: tuple[int, ...] = ()


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _labels(*shape: int) -> Tensor:
    return torch.zeros(shape, dtype=torch.long, device="meta")


def _image(size: int) -> Callable[[int], list[Tensor]]:
    return lambda batch: [_meta(batch, 3, size, size)]


def _classes(out: Tensor | tuple[Tensor, Tensor], labels: Tensor) -> Tensor:
    if isinstance(out, tuple):  # Inception v3 in training: the auxiliary logits weigh 0.4
        return F.cross_entropy(out[0], labels) + 0.4 * F.cross_entropy(out[1], labels)
    return F.cross_entropy(out, labels)


def _next_tokens(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


#: Tokens per sequence of the transformers.
GPT2_TOKENS, LLAMA_TOKENS = 1024, 2048


def _llama_inputs(batch: int) -> list[Tensor]:
    bf16 = torch.bfloat16
    return [
        _meta(batch, LLAMA_TOKENS, 4096, dtype=bf16),
        _meta(batch, 1, LLAMA_TOKENS, 128, dtype=bf16),
        _meta(batch, 1, LLAMA_TOKENS, 128, dtype=bf16),
        _meta(batch, 1, LLAMA_TOKENS, LLAMA_TOKENS, dtype=bf16),
    ]


def _classifier(build: Callable[[], nn.Module], size: int) -> _Model:
    return _Model(build, _image(size), lambda batch: [_labels(batch)], _classes)


#: The models by name: eight, each traced for inference and training at batch 1 and 8.
MODELS: dict[str, _Model] = {
    "resnet18": _classifier(lambda: ResNet(BasicBlock, (2, 2, 2, 2)), 224),
    "resnet50": _classifier(lambda: ResNet(Bottleneck, (3, 4, 6, 3)), 224),
    "mobilenet_v1": _classifier(MobileNetV1, 224),
    "mobilenet_v2": _classifier(MobileNetV2, 224),
    "mobilenet_v3": _classifier(MobileNetV3, 224),
    "inception_v3": _classifier(InceptionV3, 299),
    "gpt2": _Model(
        GPT2,
        lambda batch: [_labels(batch, GPT2_TOKENS)],
        lambda batch: [_labels(batch, GPT2_TOKENS)],
        _next_tokens,
    ),
    "llama3_8b_layer": _Model(
        lambda: LlamaLayer().to(torch.bfloat16),
        _llama_inputs,
        lambda batch: [_meta(batch, LLAMA_TOKENS, 4096, dtype=torch.bfloat16)],
        None,
        (0,),
    ),
}


@dataclass(frozen=True)
class Trace:
    """One traced program: its name (``model-mode-bBATCH``) and its blocks."""

    name: str
    blocks: list[Block]


def model_traces(
    names: Iterable[str] = MODELS,
    modes: Iterable[str] = ("inference", "training"),
    batches: Iterable[int] = (1, 8),
) -> Iterable[Trace]:
    """Trace the models: every name, mode and batch, in that nesting.

    Parameters
    ----------
    names
        Keys of :data:`MODELS`.
    modes
        ``"inference"`` and/or ``"training"``.
    batches
        Batch sizes.

    Yields
    ------
    Trace
        Named ``model-mode-bBATCH``.
    """
    for name in names:
        spec = MODELS[name]
        with torch.device("meta"):
            model = spec.build()
        for mode in modes:
            for batch in batches:
                inputs = spec.inputs(batch)
                if mode == "inference":
                    blocks = inference_blocks(model, *inputs)
                elif mode == "training":
                    blocks = training_blocks(
                        model, inputs, spec.targets(batch), spec.loss, spec.input_grads
                    )
                else:
                    raise ValueError(f"mode {mode!r}: use 'inference' or 'training'")
                yield Trace(f"{name}-{mode}-b{batch}", blocks)


def write_csv(path: Path, blocks: Sequence[Block]) -> None:
    """Write ``blocks`` as MiniMalloc's ``id,lower,upper,size`` (``upper`` exclusive)."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "lower", "upper", "size"])
        for index, (nbytes, first, last) in enumerate(blocks):
            writer.writerow([index, first, last + 1, nbytes])


def read_csv(path: Path) -> list[Block]:
    """Read MiniMalloc's ``id,lower,upper,size`` as ``(nbytes, first, last)`` blocks."""
    with path.open() as f:
        return [
            (int(row["size"]), int(row["lower"]), int(row["upper"]) - 1)
            for row in csv.DictReader(f)
        ]


def _plan_row(name: str, blocks: list[Block], time_limit: float) -> str:
    start, cpu = time.perf_counter(), time.process_time()
    plain = plan_offsets(blocks)
    plain_s, plain_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    limited = plan_offsets(blocks, time_limit=time_limit)
    limited_s, limited_cpu = time.perf_counter() - start, time.process_time() - cpu
    return (
        f"| {name} | {len(blocks):,} | {plain.lower_bound:,} | {plain.ratio:.4f} "
        f"| {limited.ratio:.4f} | {'yes' if limited.optimal else 'no'} "
        f"| {plain_s:.2f} ({plain_cpu:.2f}) | {limited_s:.2f} ({limited_cpu:.2f}) |"
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena.tools.modeltraces``."""
    parser = argparse.ArgumentParser(
        prog="python -m arena.tools.modeltraces",
        description="Trace the models to DIR as id,lower,upper,size CSVs; with --plan, "
        "plan every CSV in DIR without a limit and with --time-limit.",
    )
    parser.add_argument("dir", type=Path)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--no-trace", action="store_true", help="plan the CSVs already in DIR")
    parser.add_argument("--plan", action="store_true", help="plan every CSV in DIR")
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    if not args.no_trace:
        print(f"torch {torch.__version__}")
        for trace in model_traces(args.models):
            write_csv(args.dir / f"{trace.name}.csv", trace.blocks)
            print(f"{trace.name}: {len(trace.blocks)} blocks", flush=True)
    if args.plan:
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(
            "| trace | blocks | LOAD (bytes) | without a limit | `time_limit` "
            f"{args.time_limit:g} | optimal | s (CPU) without | s (CPU) with |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for path in sorted(args.dir.glob("*.csv")):
            print(_plan_row(path.stem, read_csv(path), args.time_limit), flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
