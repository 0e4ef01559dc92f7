"""torch tensors over arena memory (host now; CUDA through CuPy's DLPack export).

Each slot buffer is imported into torch once per growth with DLPack; each request then
gets ``alias.as_strided(shape, stride, offset)`` of a per-dtype alias of that buffer,
which costs about a third of slice + view + reshape.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.dlpack import from_dlpack

from arena.errors import DTypeError
from arena.memory.devices import Device
from arena.memory.sources import Allocation
from arena.views.dtypes import DType
from arena.views.layout import Layout

from . import check_write

__all__ = [
    "FRAMEWORK",
    "FRESH_EXPRESSION",
    "PLAN_EXPRESSION",
    "PLAN_GLOBALS",
    "check_device",
    "data_ptr",
    "fresh_views",
    "is_available",
    "native_dtype",
    "plan_source",
    "retire_views",
    "typed_views",
    "views_can_be_kept",
    "wrap",
    "write_into",
]

FRAMEWORK = "torch"

#: How arena's per-structure plans build one view (``arena.views.plan``): a format string over
#: ``src`` (from :func:`plan_source`), ``native``, ``shape``, ``strides`` and ``offset`` (in
#: elements), ``bstrides`` and ``boffset`` (in bytes) and ``numel``; empty for no plan.
PLAN_EXPRESSION = "{src}.as_strided({shape}, {strides}, {offset})"
#: One fresh view of a prepared view ``{view}``, as :func:`fresh_views` makes it, for
#: the code arena generates per cached request; empty to call :func:`fresh_views`.
FRESH_EXPRESSION = "{view}.detach()"
#: Names the plan expression uses.
PLAN_GLOBALS: dict[str, Any] = {}

_NATIVE: dict[str, Any] = {}
_detach = torch.Tensor.detach


class _Buffer:
    """A slot buffer as a ``torch.uint8`` tensor, plus one alias per dtype."""

    __slots__ = ("aliases", "base")

    def __init__(self, base: torch.Tensor) -> None:
        self.base = base
        self.aliases: dict[Any, torch.Tensor] = {}

    def alias(self, dtype: torch.dtype) -> torch.Tensor:
        alias = self.aliases.get(dtype)
        if alias is None:
            alias = self.aliases[dtype] = self.base.view(dtype)
        return alias


def is_available() -> bool:
    """Whether torch is installed."""
    return importlib.util.find_spec("torch") is not None


def check_device(device: Device) -> None:
    """torch views host memory and CUDA memory alike."""


def native_dtype(dtype: DType) -> Any:
    """The ``torch.dtype`` of the same name."""
    native = _NATIVE.get(dtype.name)
    if native is None:
        native = getattr(torch, dtype.name, None)
        if not isinstance(native, torch.dtype):
            raise DTypeError(
                f"torch {torch.__version__} has no {dtype.name} dtype; request the bytes as "
                f"'uint{8 * dtype.itemsize}' or upgrade torch"
            )
        _NATIVE[dtype.name] = native
    return native


def plan_source(buffer: Any, native: Any) -> Any:
    """What :data:`PLAN_EXPRESSION` builds views from: the buffer's alias for ``native``
    (made outside inference mode, see :func:`wrap`)."""
    with torch.inference_mode(False):
        return buffer.alias(native)


def retire_views(views: Sequence[Any]) -> None:
    """Debug mode, at the end of a scope or a step view's life: each tensor handed out is
    set to an empty storage, so a later use fails (a size-0 tensor) instead of reading
    bytes that now belong to another request. Views taken from it earlier keep working."""
    for view in views:
        if isinstance(view, torch.Tensor) and not view.requires_grad:
            with torch.no_grad():
                view.set_()  # type: ignore[call-overload]


def views_can_be_kept() -> bool:
    """Whether views a plan builds now may be remembered and handed out later: not inside
    ``torch.inference_mode()``, where they would carry the mode into later requests."""
    return not torch.is_inference_mode_enabled()


def wrap(allocation: Allocation) -> Any:
    """Import the whole buffer into torch once (zero-copy DLPack).

    Built outside inference mode whatever mode the caller is in: a tensor made under
    ``torch.inference_mode()`` is an inference tensor for good, and every view of it too,
    so a later request used under autograd would fail ("Inference tensors cannot be saved
    for backward").
    """
    with torch.inference_mode(False):
        base = from_dlpack(allocation.owner)
        if base.numel() == 0:  # DLPack gives empty tensors stride 0, which view(dtype) refuses
            base = base.as_strided((0,), (1,))
    return _Buffer(base)


def typed_views(buffer: Any, layout: Layout) -> list[Any]:
    """``as_strided`` views of per-dtype aliases at the layout's offsets.

    Built outside inference mode (see :func:`wrap`): the prepared views are normal
    tensors, and the fresh views handed out per request (``detach()``, a view op) are
    normal tensors in either mode.
    """
    views = []
    with torch.inference_mode(False):
        for v in layout.views:
            alias = buffer.alias(native_dtype(v.dtype))
            views.append(alias.as_strided(v.shape, v.strides, v.offset // v.dtype.itemsize))
    return views


def fresh_views(views: Sequence[Any]) -> list[Any] | None:
    """``t.detach()`` of each prepared view: new tensor objects, same memory."""
    return list(map(_detach, views))


def data_ptr(view: Any) -> int:
    """Address of the first element."""
    return int(view.data_ptr())


def write_into(view: Any, value: Any) -> Any:
    """Copy ``value`` (a tensor, or an array ``torch.as_tensor`` reads, of ``view``'s dtype
    and shape: see :func:`arena.adapters.check_write`) into ``view``; returns ``view``."""
    check_write(view, value)
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value)
    view.copy_(value)
    return view
