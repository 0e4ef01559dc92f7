"""The adapter contract: what a front asks of a framework, with its defaults, written once.

Each adapter module (``arena.adapters.numpy``, ``.torch``, ``.cupy``, ``.jax``) defines
one subclass of :class:`Adapter` and exposes its instance as ``ADAPTER``; a front holds
that instance. A subclass implements the abstract methods and sets the class attributes
its framework needs; everything else has a default here.
"""

from __future__ import annotations

import abc
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from arena.base.dtypes import DType
from arena.base.layout import Layout
from arena.base.poison import sentinel_byte
from arena.memory.devices import Device
from arena.memory.sources import Allocation

__all__ = ["Adapter", "PlanView"]

#: ``plan_view(source, native, shape, strides, offset)`` -> one view: ``source`` from
#: :attr:`Adapter.plan_source`, ``native`` the framework's dtype, ``strides`` and ``offset``
#: in bytes, or in elements where :attr:`Adapter.plan_in_bytes` is False.
PlanView = Callable[[Any, Any, tuple[int, ...], tuple[int, ...], int], Any]


class Adapter(abc.ABC):
    """How one framework views an arena's memory.

    Class attributes
    ----------------
    framework : str
        The framework's name, as a front reports it (``"torch"``).
    shares_views : bool
        Whether a cached front may hand every caller the very same view objects (default
        True). False for JAX: a shared ``jax.Array`` may hold a host copy cached by an
        earlier read, so every request gets new arrays, and there is no in-place change to
        guard against.
    fresh_view : callable or None
        ``fresh_view(view)`` -> a new view object over the same memory, with metadata of
        its own (torch: the tensor's ``.data``; ``numpy.ndarray.view``). The compiled hit path
        calls it per view without running Python code. None where a fresh view needs more
        than one call (JAX: :meth:`fresh_views` checks for donated arrays first).
    plan_view : callable or None
        Builds one view of a request a per-structure plan serves (see :data:`PlanView`);
        None where views cannot be built that cheaply (JAX imports each through DLPack),
        and new layouts then take :meth:`typed_views`.
    plan_in_bytes : bool
        Whether :attr:`plan_view` takes strides and offset in bytes (default; NumPy and
        CuPy) or in elements (torch, whose source is an alias of the view's dtype).
    plan_source : callable or None
        ``plan_source(buffer, native)`` -> what :attr:`plan_view` builds views of
        ``native`` from, given ``buffer`` (from :meth:`wrap`); made once per buffer and
        plan (torch: the buffer's alias for the dtype). None (default): ``buffer`` itself.
    inference : bool
        Whether the views are the framework's inference-mode arrays (torch's inference
        tensors: ``ws.front("torch", inference=True)``). Default False.
    namespace : str
        Where a slot buffer keeps this adapter's import, plan sources and remembered view
        sets (``Buffer.wrappers``, ``Buffer.prepared``) and a persistent buffer its view:
        "" (default) for the framework's name. Another adapter of the same framework
        whose views differ (torch's inference adapter) keeps its own.
    """

    framework: ClassVar[str] = ""
    shares_views: ClassVar[bool] = True
    # Any: a Callable class attribute would read to mypy as a method taking self.
    fresh_view: ClassVar[Any] = None  # Callable[[Any], Any] | None
    plan_view: ClassVar[Any] = None  # PlanView | None
    plan_in_bytes: ClassVar[bool] = True
    plan_source: ClassVar[Any] = None  # Callable[[Any, Any], Any] | None
    inference: ClassVar[bool] = False
    namespace: ClassVar[str] = ""

    @property
    def space(self) -> str:
        """:attr:`namespace`, or the framework's name where it is ""."""
        return self.namespace or self.framework

    def is_available(self) -> bool:
        """Whether the framework is installed (without importing it)."""
        return importlib.util.find_spec(self.framework) is not None

    def check_device(self, device: Device) -> None:  # noqa: B027 (a default, not abstract)
        """Raise :class:`~arena.errors.FrameworkUnavailableError` if the framework cannot
        view memory on ``device``. Default: every device."""

    @abc.abstractmethod
    def native_dtype(self, dtype: DType) -> Any:
        """The framework's dtype for an :class:`arena.DType`, or a clear
        :class:`~arena.errors.DTypeError`."""

    @abc.abstractmethod
    def wrap(self, allocation: Allocation) -> Any:
        """The framework's handle on a whole buffer: made once per buffer (per growth)."""

    @abc.abstractmethod
    def typed_views(self, buffer: Any, layout: Layout) -> list[Any]:
        """One typed view per entry of ``layout``, over ``buffer`` (from :meth:`wrap`)."""

    def fresh_views(self, views: Sequence[Any]) -> list[Any] | None:
        """New view objects over the same memory (cheap; metadata not shared).

        Returns None when a prepared view can no longer be used (a JAX array deleted by
        donation): the front then builds the views again. May raise when no view may be
        handed out now (JAX while it traces a function). Default: :attr:`fresh_view` of
        each.
        """
        fresh = type(self).fresh_view
        assert fresh is not None, f"{type(self).__name__} needs fresh_view or fresh_views"
        return list(map(fresh, views))

    def for_inference(self) -> Adapter | None:
        """The adapter of this framework's inference-mode arrays (torch: inference
        tensors, ``ws.front("torch", inference=True)``), or None where the framework has
        no such mode (default)."""
        return None

    def views_can_be_kept(self) -> bool:
        """Whether views a plan builds now may be remembered and handed out later (torch:
        not inside ``torch.inference_mode()``). Default: True."""
        return True

    @abc.abstractmethod
    def data_ptr(self, view: Any) -> int:
        """Address of a view's first element."""

    def retire_views(self, views: Sequence[Any]) -> None:  # noqa: B027 (a default)
        """Debug mode, when a scope exits or a step view is released: make the views
        handed out unusable where the framework allows it (torch: an empty storage; JAX:
        ``delete()``). Default: nothing (NumPy and CuPy arrays cannot be invalidated;
        poisoning shows stale reads)."""

    @abc.abstractmethod
    def write_into(self, view: Any, value: Any) -> Any:
        """Copy ``value`` into the memory behind ``view``; return what to read the new
        contents through (``view`` itself, except for JAX: a new array over the same
        bytes).

        Every adapter applies the same rule first (:func:`arena.adapters.check_write`):
        ``value`` is an array of any framework with exactly the view's dtype and shape;
        nothing is cast or broadcast, and nothing is written when it is refused.
        """

    def fill(self, views: Sequence[Any]) -> None:
        """Poisoning: fill every view with its sentinel byte
        (:func:`arena.base.poison.sentinel_byte`). Default: NumPy's and CuPy's API, one
        ``fill`` of a byte view per view."""
        for view in views:
            view.reshape(-1).view("uint8").fill(sentinel_byte(view.dtype))

    def __repr__(self) -> str:
        return f"<arena adapter {self.framework!r}>"
