"""torch tensors over arena memory (host now; CUDA through CuPy's DLPack export).

Each slot buffer is imported into torch once per growth with DLPack; each request then
gets ``alias.as_strided(shape, stride, offset)`` of a per-dtype alias of that buffer,
which costs about a third of slice + view + reshape.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.dlpack import from_dlpack

from arena.base.dtypes import DType
from arena.base.layout import Layout
from arena.base.poison import sentinel_byte
from arena.errors import DTypeError
from arena.memory.sources import Allocation

from . import check_write
from .base import Adapter

__all__ = ["ADAPTER", "TorchAdapter"]

_NATIVE: dict[str, Any] = {}


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


def _plan_view(
    source: Any, native: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> Any:
    """A plan's view: ``as_strided`` of the buffer's alias for the view's dtype (elements),
    handed out as ``view.data``: a tensor of its own over those bytes, never an autograd
    view of the alias.

    An autograd view of the alias would share its version counter and its history with
    every other view of the buffer: a first request's two views (handed as built) failed
    a backward pass that saved one of them when the other was written in place, and a
    handed view written in place with a value that requires grad (``view.copy_(x * 2)``)
    gave the alias that history, and with it every view a cached front had remembered of
    it, for any request (their backward failed, "backward through the graph a second
    time"). ``.data`` costs on a plan's miss only, never on a hit: a 3-view request of new
    sizes took 1.16x as long (7.7 -> 8.8 us, paired rounds, load ~9).
    """
    return source.as_strided(shape, strides, offset).data


def _as_tensor(value: Any) -> Any:
    """``torch.as_tensor(value)``, or the same bytes through DLPack where torch refuses the
    array interface it reads or warns at it, for values ``write_into`` only reads from: a
    JAX array on a GPU publishes a read-only ``__cuda_array_interface__`` ("the read only
    flag is not supported", seen on the first GPU run); a read-only NumPy array (a memmap
    opened ``mode="r"``, a broadcast) makes ``torch.as_tensor`` warn that writing the
    tensor is undefined behaviour (a ``UserWarning``, an error wherever warnings are)."""
    if not _read_only_ndarray(value):
        try:
            return torch.as_tensor(value)
        except TypeError as error:
            if "read only" not in str(error) or not hasattr(value, "__dlpack__"):
                raise
    try:
        return from_dlpack(value)
    except (TypeError, ValueError, RuntimeError, BufferError):
        # A DLPack torch does not import either (a read-only flag again): through the host.
        import numpy as np

        return torch.from_numpy(np.array(value))  # a writable copy: torch warns on read-only


def _read_only_ndarray(value: Any) -> bool:
    """Whether ``value`` is a NumPy array (a subclass too) that may not be written."""
    numpy = sys.modules.get("numpy")  # no NumPy imported: no NumPy array
    return numpy is not None and isinstance(value, numpy.ndarray) and not value.flags.writeable


class TorchAdapter(Adapter):
    """torch tensors: ``as_strided`` views of per-dtype aliases of one DLPack import per
    buffer; fresh views are ``t.data``.

    ``t.data`` and ``t.detach()`` both make a new tensor over the same memory that does
    not require grad and that a caller may change in place (``requires_grad_()``,
    ``resize_()``, ``set_()``) without touching ``t``. ``t.data`` gives each view a version
    counter of its own, where ``detach()`` shares ``t``'s, and with it the buffer's: a
    view saved for backward then failed the backward pass when another, disjoint view of
    the same buffer was written in place (two views of one scope, say). It also costs
    about two thirds of a ``detach()``, which releases and takes back the GIL on every
    call."""

    framework = "torch"
    fresh_view = operator.attrgetter("data")
    plan_view = staticmethod(_plan_view)
    plan_in_bytes = False

    def native_dtype(self, dtype: DType) -> Any:
        """The ``torch.dtype`` of the same name."""
        native = _NATIVE.get(dtype.name)
        if native is None:
            native = getattr(torch, dtype.name, None)
            if not isinstance(native, torch.dtype):
                raise DTypeError(
                    f"torch {torch.__version__} has no {dtype.name} dtype; request the bytes "
                    f"as 'uint{8 * dtype.itemsize}' or upgrade torch"
                )
            _NATIVE[dtype.name] = native
        return native

    def plan_source(self, buffer: Any, native: Any) -> Any:
        """The buffer's alias for ``native`` (made outside inference mode, see
        :meth:`wrap`; inside it for :class:`_TorchInferenceAdapter`)."""
        with torch.inference_mode(self.inference):
            return buffer.alias(native)

    def for_inference(self) -> Adapter | None:
        """The adapter of torch inference tensors (:class:`_TorchInferenceAdapter`)."""
        return _INFERENCE

    def views_can_be_kept(self) -> bool:
        """Not inside ``torch.inference_mode()``: views made there would carry the mode
        into later requests."""
        return not torch.is_inference_mode_enabled()

    def wrap(self, allocation: Allocation) -> Any:
        """Import the whole buffer into torch once (zero-copy DLPack).

        Built outside inference mode whatever mode the caller is in: a tensor made under
        ``torch.inference_mode()`` is an inference tensor for good, and every view of it
        too, so a later request used under autograd would fail ("Inference tensors cannot
        be saved for backward").
        """
        with torch.inference_mode(self.inference):
            base = from_dlpack(allocation.owner)
            if base.numel() == 0:  # DLPack gives empty tensors stride 0; view(dtype) refuses
                base = base.as_strided((0,), (1,))
        return _Buffer(base)

    def typed_views(self, buffer: Any, layout: Layout) -> list[Any]:
        """``as_strided`` views of per-dtype aliases at the layout's offsets.

        Built outside inference mode (see :meth:`wrap`): the prepared views are normal
        tensors, and the fresh views handed out per request (``t.data``) are normal
        tensors in either mode. Made by :attr:`plan_view`, as a plan's are: one way to
        make a view.
        """
        views = []
        with torch.inference_mode(self.inference):
            for v in layout.views:
                native = self.native_dtype(v.dtype)
                offset = v.offset // v.dtype.itemsize  # in elements of the alias
                views.append(_plan_view(buffer.alias(native), native, v.shape, v.strides, offset))
        return views

    def retire_views(self, views: Sequence[Any]) -> None:
        """Debug mode, at the end of a scope or a step view's life: each tensor handed out
        is set to an empty storage, so a later use fails (a size-0 tensor) instead of
        reading bytes that now belong to another request. Views taken from it earlier keep
        working."""
        for view in views:
            if isinstance(view, torch.Tensor) and not view.requires_grad:
                with torch.no_grad():
                    view.set_()  # type: ignore[call-overload]

    def data_ptr(self, view: Any) -> int:
        """Address of the first element."""
        return int(view.data_ptr())

    def write_into(self, view: Any, value: Any) -> Any:
        """Copy ``value`` (a tensor, or an array ``torch.as_tensor`` reads, of ``view``'s
        dtype and shape: see :func:`arena.adapters.check_write`) into ``view``; returns
        ``view``."""
        check_write(view, value)
        if not isinstance(value, torch.Tensor):
            value = _as_tensor(value)
            # What was read, not what the value says of itself: a DLPack or host copy of
            # another shape or dtype would be broadcast or cast by copy_.
            check_write(view, value)
        view.copy_(value)
        return view

    def fill(self, views: Sequence[Any]) -> None:
        """Poisoning: ``fill_`` of a byte view on a GPU (on torch's current stream), one
        ``memset`` on the host (torch's own CPU fill runs on its intra-op thread pool,
        which costs milliseconds per call when the cores are busy elsewhere)."""
        for view in views:
            if view.is_cuda:
                view.view(-1).view(torch.uint8).fill_(sentinel_byte(view.dtype))
            elif view.numel():
                ctypes.memset(
                    view.data_ptr(), sentinel_byte(view.dtype), view.numel() * view.itemsize
                )


class _TorchInferenceAdapter(TorchAdapter):
    """torch inference tensors: the adapter of ``ws.front("torch", inference=True)``
    (and of ``ws.torch`` in an arena made with ``inference_views=True``).

    The same views as :class:`TorchAdapter`'s, built inside ``torch.inference_mode()``
    from an import of the buffer made there: every view is an inference tensor, whatever
    the caller's mode, like ``torch.empty``'s inside the mode. A view's ``.data`` and
    ``as_strided`` stay inference tensors in any mode, so hits, step replays and scope
    hits hand them out at no cost per request. Inside the mode they skip autograd's
    ``ADInplaceOrView`` kernel and version counter, which a normal tensor written there
    pays on every in-place or ``out=`` op (about 8 % of a 4-layer decoder pass on normal
    tensors, see docs/performance.md).

    Outside inference mode torch refuses saving them for backward, and writing in place
    one handed out inside the mode (its own ``RuntimeError``s); reading them works. The
    import, plan sources and remembered view sets are the adapter's own
    (:attr:`namespace`), never shared with the normal tensors of ``ws.torch``. Debug
    retirement, poisoning on a GPU and
    :meth:`write_into` run inside the mode, so they work from any mode.
    """

    inference = True
    namespace = "torch/inference"

    def views_can_be_kept(self) -> bool:
        """Always: the views are inference tensors whatever the caller's mode."""
        return True

    def retire_views(self, views: Sequence[Any]) -> None:
        """:meth:`TorchAdapter.retire_views` inside inference mode (an inference tensor's
        ``set_()`` is refused outside it)."""
        with torch.inference_mode():
            super().retire_views(views)

    def write_into(self, view: Any, value: Any) -> Any:
        """:meth:`TorchAdapter.write_into` inside inference mode (an inference tensor's
        ``copy_`` is refused outside it)."""
        with torch.inference_mode():
            return super().write_into(view, value)

    def fill(self, views: Sequence[Any]) -> None:
        """:meth:`TorchAdapter.fill` inside inference mode (a GPU view's ``fill_``)."""
        with torch.inference_mode():
            super().fill(views)


#: The adapter a torch front uses.
ADAPTER = TorchAdapter()
#: The adapter of a torch front made with ``inference=True`` (``ADAPTER.for_inference()``;
#: the module exports the contract's two names only).
_INFERENCE = _TorchInferenceAdapter()
