"""JAX arrays over arena memory, zero-copy through DLPack.

JAX treats imported buffers as immutable. The contract (see docs/jax.md):

* write through another framework's view (NumPy, torch, CuPy) or :func:`write_into`, then
  read in JAX;
* never donate an arena-backed array to a jitted function; if one is donated anyway, the
  imports it deleted are made again by the next request (never a deleted array);
* request views outside traced functions and pass them in: a request while JAX traces
  raises :class:`~arena.errors.TracedRequestError` (the view would be a baked-in constant);
* JAX dispatch is asynchronous: block on results (``jax.block_until_ready``) before the
  next ``get_simultaneous`` on the same slot reuses the bytes.

Importing costs about 25 us per array, so the views a layout needs are imported once per
(slot, layout, buffer). Every request then gets **new** ``jax.Array`` objects over those
imported buffers (about 2 us each): JAX caches an array's host copy on the array object
the first time a read needs one (``ArrayImpl._npy_value``; always on a GPU), so handing
out the same object again after the bytes changed would show stale values. The new
arrays are uncommitted, like ``jnp.zeros``, so mixing them with ordinary arrays does not
double jit caches. Growth drops the imports with the old buffer.

Zero-copy is checked on every import: JAX silently copies buffers that are not 64-byte
aligned on CPU and converts 64-bit dtypes when ``jax_enable_x64`` is off. Both raise here
instead.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

try:
    from jax.extend.core import find_top_trace as _find_top_trace
except ImportError:  # JAX releases whose jax.extend.core does not export it yet
    # Looked up, not imported: newer JAX (and its stubs) has no jax.core.find_top_trace.
    _find_top_trace = importlib.import_module("jax.core").find_top_trace

from arena.base.dtypes import DType
from arena.base.layout import Layout
from arena.base.poison import sentinel_byte
from arena.errors import ArenaError, ConfigError, DTypeError, GraphCaptureError, TracedRequestError
from arena.memory.sources import Allocation

from . import check_write
from .base import Adapter
from .numpy import ADAPTER as NUMPY

__all__ = ["ADAPTER", "JaxAdapter"]

#: JAX imports host memory without a copy only at this alignment.
CPU_ZERO_COPY_ALIGNMENT = 64
_SIXTY_FOUR_BIT = {"int64", "uint64", "float64", "complex128"}
#: Dtypes JAX cannot hold (XLA has no complex with 16-bit parts).
_UNSUPPORTED = {"complex32"}
#: The trace JAX runs under now: given no arrays, the innermost active trace.
_top_trace: Callable[[tuple[()]], Any] = _find_top_trace

# The type of trace JAX runs eagerly under; any other (jit, make_jaxpr, vmap, grad, loop
# bodies) is tracing. Taken inside eval_context, so importing the adapter under a trace
# cannot take the wrong one.
with jax.core.eval_context():
    _EVAL_TRACE = type(_top_trace(()))


def _is_torch_tensor(owner: Any) -> bool:
    """Whether ``owner`` is a torch tensor (without importing torch)."""
    return type(owner).__module__.partition(".")[0] == "torch"


def _source(allocation: Allocation, v: Any, dtype: Any) -> Any:
    """A typed array of the view's bytes that exports DLPack: NumPy on the host; on CUDA,
    CuPy or torch, whichever owns the buffer."""
    owner = allocation.owner
    if _is_torch_tensor(owner):  # a 1-D uint8 torch tensor (the torch source)
        import torch

        raw = owner[v.offset : v.offset + v.nbytes]
        if not v.nbytes:
            return torch.empty(v.shape, dtype=getattr(torch, v.dtype.name), device=owner.device)
        typed = raw.view(getattr(torch, v.dtype.name))
        return typed.as_strided(v.shape, v.strides)
    if allocation.device.is_cuda:
        import cupy

        return cupy.ndarray(
            v.shape, dtype=dtype, memptr=owner.data + v.offset, strides=v.byte_strides
        )
    return np.ndarray(v.shape, dtype=dtype, buffer=owner, offset=v.offset, strides=v.byte_strides)


def _import(source: Any, dtype: DType) -> Any:
    """``jax.dlpack.from_dlpack``; NumPy and CuPy cannot export bfloat16 and float8 through
    DLPack, torch can: those dtypes travel through a zero-copy torch view when torch is
    installed."""
    try:
        return jax.dlpack.from_dlpack(source)
    except BufferError:
        if importlib.util.find_spec("torch") is None:
            raise DTypeError(
                f"JAX can only import {dtype.name} arena views through torch's DLPack export "
                "(NumPy and CuPy have no DLPack code for it): install torch, or request "
                f"'uint{8 * dtype.itemsize}' and use jax.lax.bitcast_convert_type"
            ) from None
        import torch
        from torch.utils.dlpack import from_dlpack

        # NumPy changes the dtype of a 0-d array only at the same itemsize: flatten first.
        raw = source.reshape(-1).view(np.uint8)
        tensor = from_dlpack(raw).view(getattr(torch, dtype.name)).reshape(source.shape)
        return jax.dlpack.from_dlpack(tensor)


def _fresh(array: Any) -> Any:
    """A new uncommitted ``jax.Array`` object over ``array``'s device buffer (no copy)."""
    # The class of the array itself (jaxlib's ArrayImpl), not an import of JAX's private
    # module path. Positional arguments: (aval, sharding, arrays, committed, _skip_checks);
    # keywords cost 40 % more in this C++ constructor. The public
    # jax.make_array_from_single_device_arrays makes committed arrays, 4x slower.
    return array.__class__(array.aval, array.sharding, [array], False, True)


def _check_not_tracing() -> None:
    """Raise :class:`TracedRequestError` while JAX traces a function."""
    trace = _top_trace(())
    if trace.__class__ is not _EVAL_TRACE:
        raise TracedRequestError(
            f"a JAX view of arena memory was requested while JAX traces a function "
            f"({type(trace).__name__}: jax.jit, make_jaxpr, vmap, grad or a lax loop body). "
            "The view would be baked into the traced function as a constant, and later "
            "writes to the arena would never be seen. Request the view outside the traced "
            "function and pass the view in as an argument: "
            "(x,) = ws.jax.get_simultaneous(...); f(x)"
        )


def _write_cuda(view: Any, value: Any, address: int, nbytes: int, device_id: int) -> None:
    """The CUDA copy for :func:`write_into`: through CuPy when installed, else torch.

    ``device_id`` is the CUDA ordinal (``Device.local_hardware_id``), not JAX's global id.
    """
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        memory = cupy.cuda.UnownedMemory(address, nbytes, view, device_id=device_id)
        target = cupy.ndarray(
            view.shape, dtype=view.dtype, memptr=cupy.cuda.MemoryPointer(memory, 0)
        )
        with cupy.cuda.Device(device_id):
            if isinstance(value, jax.Array):
                target[...] = cupy.from_dlpack(value)
            else:
                target[...] = cupy.asarray(value)
            cupy.cuda.get_current_stream().synchronize()
        return
    import torch
    from torch.utils.dlpack import from_dlpack

    target = from_dlpack(view)  # zero-copy: the arena bytes behind view
    if target.data_ptr() != address:
        raise ArenaError(
            f"torch's DLPack import of a JAX view at {address:#x} landed at "
            f"{target.data_ptr():#x}; install CuPy for write_into on this setup"
        )
    with torch.cuda.device(device_id):
        source = from_dlpack(value) if isinstance(value, jax.Array) else value
        target.copy_(torch.as_tensor(source, device=target.device))
        torch.cuda.current_stream().synchronize()


class JaxAdapter(Adapter):
    """JAX arrays over arena memory, imported once per (layout, buffer) through DLPack;
    every request gets new uncommitted ``jax.Array`` objects over those imports.

    No plans (``plan_view`` None: each view needs a DLPack import) and no shared views
    (``shares_views`` False: a shared array may hold a stale host copy).
    """

    framework = "jax"
    shares_views = False

    def native_dtype(self, dtype: DType) -> Any:
        """The NumPy dtype JAX uses for ``dtype``.

        Raises
        ------
        DTypeError
            For 64-bit dtypes while ``jax_enable_x64`` is off (JAX would silently convert
            them, which is a copy) and for dtypes JAX lacks.
        """
        if dtype.name in _SIXTY_FOUR_BIT and not jax.config.read("jax_enable_x64"):  # type: ignore[no-untyped-call]
            raise DTypeError(
                f"{dtype.name} needs 64-bit mode in JAX: without it JAX silently converts to a "
                "32-bit copy. Enable it with jax.config.update('jax_enable_x64', True) (or "
                "JAX_ENABLE_X64=1) before making arrays, or request a 32-bit dtype"
            )
        if dtype.name in _UNSUPPORTED:
            raise DTypeError(
                f"JAX has no {dtype.name} arrays; request the bytes as "
                f"'uint{8 * dtype.itemsize}' (or 'complex64' if the width is yours to choose) "
                "and convert in JAX, or view these bytes through the torch front"
            )
        return NUMPY.native_dtype(dtype)

    def wrap(self, allocation: Allocation) -> Any:
        """The allocation itself: every view is imported from a typed NumPy or CuPy view."""
        return allocation

    def typed_views(self, buffer: Any, layout: Layout) -> list[Any]:
        """Zero-copy ``jax.Array`` views at the layout's offsets (checked by pointer).

        The prepared arrays are uncommitted; :func:`fresh_views` hands out new objects over
        them per request.
        """
        _check_not_tracing()
        allocation: Allocation = buffer
        views: list[Any] = []
        for v in layout.views:
            dtype = self.native_dtype(v.dtype)
            address = allocation.ptr + v.offset
            if not allocation.device.is_cuda and address % CPU_ZERO_COPY_ALIGNMENT and v.nbytes:
                raise ArenaError(
                    f"JAX copies host buffers that are not {CPU_ZERO_COPY_ALIGNMENT}-byte "
                    f"aligned; this view sits at offset {v.offset} (arena alignment "
                    f"{layout.alignment}). Construct the arena with alignment>="
                    f"{CPU_ZERO_COPY_ALIGNMENT} for JAX views"
                )
            array = _fresh(_import(_source(allocation, v, dtype), v.dtype))
            if v.nbytes and array.unsafe_buffer_pointer() != address:
                raise ArenaError(
                    f"JAX copied view #{len(views)} ({v.shape} {v.dtype.name}) instead of "
                    f"viewing the arena's memory at {address:#x}; please report this with your "
                    f"JAX version ({jax.__version__})"
                )
            views.append(array)
        return views

    def fresh_views(self, views: Sequence[Any]) -> list[Any] | None:
        """New uncommitted ``jax.Array`` objects over the prepared ones' buffers (no copy).

        New objects carry no host copy cached from an earlier read, so they never show
        bytes from before this request.

        Returns
        -------
        list or None
            None when a prepared array was deleted (donated to a jitted function, or
            ``delete()``): a new object over it would be deleted too, so the front imports
            the views again.

        Raises
        ------
        TracedRequestError
            While JAX traces a function.
        """
        if _top_trace(()).__class__ is not _EVAL_TRACE:
            _check_not_tracing()
        for view in views:
            if view.is_deleted():
                return None
        return list(map(_fresh, views))

    def retire_views(self, views: Sequence[Any]) -> None:
        """Debug mode, at the end of a scope or a step view's life: each array handed out
        is deleted, so a later use raises JAX's "Array has been deleted" instead of reading
        bytes that now belong to another request."""
        for view in views:
            delete = getattr(view, "delete", None)
            if delete is not None and not view.is_deleted():
                delete()

    def data_ptr(self, view: Any) -> int:
        """Address of the first element."""
        return int(view.unsafe_buffer_pointer())

    def write_into(self, view: Any, value: Any) -> Any:
        """Write ``value`` (e.g. a JAX result) into the arena bytes behind ``view``.

        One copy, straight into the arena memory: no intermediate array. ``value`` must
        have ``view``'s dtype and shape (:func:`arena.adapters.check_write`: nothing is cast
        or broadcast); it is blocked on first.

        Returns
        -------
        jax.Array
            A new array over ``view``'s bytes (uncommitted, zero-copy), to read the new
            contents with. ``view`` itself may already hold a host copy cached by an earlier
            read (``print``, ``np.asarray`` on a GPU), which JAX would keep showing.
        """
        check_write(view, value)
        value = jax.block_until_ready(value)  # type: ignore[no-untyped-call]
        address = int(view.unsafe_buffer_pointer())
        nbytes = int(view.nbytes)
        device = next(iter(view.devices()))
        if device.platform in {"gpu", "cuda"}:
            _write_cuda(view, value, address, nbytes, int(device.local_hardware_id))
            return _fresh(view)
        if nbytes:
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
            target = raw.view(view.dtype).reshape(view.shape)
            np.copyto(target, np.asarray(value), casting="no")
        return _fresh(view)

    def fill(self, views: Sequence[Any]) -> None:
        """Poisoning: JAX arrays are immutable, so the bytes behind them are written (as
        :meth:`write_into` does): a ``memset`` on the host, CuPy's on a GPU."""
        for view in views:
            nbytes = int(view.nbytes)
            if not nbytes:
                continue
            address = int(view.unsafe_buffer_pointer())
            byte = sentinel_byte(view.dtype)
            device = next(iter(view.devices()))
            if device.platform in {"gpu", "cuda"}:
                import cupy

                with cupy.cuda.Device(int(device.local_hardware_id)):
                    cupy.cuda.runtime.memset(address, byte, nbytes)
            else:
                ctypes.memset(address, byte, nbytes)


#: The adapter a JAX front uses.
ADAPTER = JaxAdapter()


def _runs_on_gpu(ctx: Any) -> bool:
    """Whether JAX runs the computation that called back on a GPU: there
    ``ctx.stream`` is XLA's stream; on the CPU reading it raises ("XLA FFI GPU context
    is not available")."""
    try:
        ctx.stream  # noqa: B018 - read for its error
    except Exception:
        return False
    return True


def _placed_elsewhere(ctx: Any, on_gpu: bool) -> str | None:
    """What to say where the computation runs elsewhere than the arena's memory; ``None``
    where both are on one side."""
    computation_on_gpu = _runs_on_gpu(ctx)
    if computation_on_gpu == on_gpu:
        return None
    if on_gpu:
        return (
            "scratch_callback's fn failed, and JAX runs this computation on the CPU while "
            "the arena's scratch views are GPU memory (CuPy arrays). Put the jitted "
            "function's inputs on the GPU (jax.device_put(x, jax.devices('gpu')[0])), or "
            "use a host arena (arena.Arena('cpu')) for a computation on the CPU"
        )
    return (
        "scratch_callback's fn failed: JAX runs this computation on a GPU (its inputs' "
        "device, or JAX's default device), so its outputs and inputs are GPU buffers "
        "(np.asarray of them fails), while this arena's scratch views are host memory "
        "(NumPy arrays). Put the jitted function's inputs on the CPU "
        "(jax.device_put(x, jax.devices('cpu')[0])) or make the CPU JAX's default device "
        "(jax.config.update('jax_default_device', jax.devices('cpu')[0])), or use an "
        "arena on the GPU (arena.Arena('cuda:0'))"
    )


class ScratchCallback:
    """A function usable inside ``jax.jit`` that runs ``fn(ctx, outputs, *inputs,
    scratch=views)`` through ``jax.experimental.buffer_callback``; made by
    :meth:`arena.Front.scratch_callback` (``ws.jax.scratch_callback``), which documents it.

    Parameters
    ----------
    fn : callable
        ``fn(ctx, outputs, *inputs, scratch=views)``, returning nothing; ``ctx`` is JAX's
        ``ExecutionContext`` (``ctx.stream``: XLA's stream on a GPU).
    result_shape_dtypes : pytree of objects with ``shape`` and ``dtype``
        The outputs, as ``buffer_callback`` takes them.
    views : tuple
        The scratch views (NumPy on the host, CuPy on a GPU) over a block of their own,
        made once: the same pointers at every call.
    command_buffer_compatible : bool
        Let XLA record the callback into a command buffer (a CUDA graph) and replay it
        without running Python: the scratch pointers are baked in, so the arena must be
        locked when a call is traced.
    input_output_aliases : dict or None
        ``buffer_callback``'s input -> output aliases (flattened indices).
    locked : callable
        Whether the arena is locked now.
    owns : callable
        Whether an address lies in a block of the arena.
    on_gpu : bool
        Whether the arena's memory is on a CUDA device (else on the host). Where ``fn``
        raises and JAX runs the computation elsewhere than the arena's memory lies (a
        host arena's callback in a computation JAX placed on a GPU, say), the error says
        so, names the fix and quotes fn's own error (JAX reports the last exception's
        text only, not its cause).
    """

    __slots__ = ("__weakref__", "_aliases", "_call", "_command_buffer", "_locked", "_owns", "views")

    def __init__(
        self,
        fn: Callable[..., Any],
        result_shape_dtypes: Any,
        views: tuple[Any, ...],
        *,
        command_buffer_compatible: bool,
        input_output_aliases: dict[int, int] | None,
        locked: Callable[[], bool],
        owns: Callable[[int], bool],
        on_gpu: bool = False,
    ) -> None:
        if not callable(fn):
            raise ConfigError(
                f"scratch_callback needs fn(ctx, outputs, *inputs, scratch=views), got {fn!r}"
            )
        from jax.experimental.buffer_callback import buffer_callback

        self.views = views

        def run(ctx: Any, outputs: Any, *inputs: Any) -> None:
            try:
                fn(ctx, outputs, *inputs, scratch=views)
            except Exception as error:  # only then: the check costs an exception on the host
                elsewhere = _placed_elsewhere(ctx, on_gpu)
                if elsewhere is None:
                    raise
                # fn's error in the text too: JAX reports only the last exception's, not
                # its cause.
                raise ArenaError(
                    f"{elsewhere}. fn raised {type(error).__name__}: {error}"
                ) from error

        self._call = buffer_callback(
            run,
            result_shape_dtypes,
            input_output_aliases=input_output_aliases,
            command_buffer_compatible=command_buffer_compatible,
        )
        self._aliases = dict(input_output_aliases or {})
        self._command_buffer = command_buffer_compatible
        self._locked = locked
        self._owns = owns

    def __call__(self, *inputs: Any) -> Any:
        """The outputs (JAX arrays) of one run of ``fn``; inside ``jax.jit`` this runs at
        trace time and the checks below with it.

        Raises
        ------
        GraphCaptureError
            ``command_buffer_compatible=True`` and the arena is not locked.
        ArenaError
            An arena view passed as an aliased input (XLA would copy it).
        """
        if self._command_buffer and not self._locked():
            raise GraphCaptureError(
                "scratch_callback(command_buffer_compatible=True) was traced while the arena "
                "is unlocked: XLA records the callback into a command buffer (a CUDA graph) "
                "with the scratch pointers baked in and replays it without running Python. "
                "Warm up, call ws.lock(), then trace (call the jitted function) again"
            )
        leaves = jax.tree_util.tree_leaves(inputs)
        for index in self._aliases:
            leaf: Any = leaves[index] if 0 <= index < len(leaves) else None
            concrete = isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)
            if concrete and not leaf.is_deleted() and self._owns(leaf.unsafe_buffer_pointer()):
                raise ArenaError(
                    f"input {index} of scratch_callback is an arena view and is aliased "
                    f"to output {self._aliases[index]}: XLA does not own arena memory, so "
                    "it would copy the view into a buffer of its own (donated or not; "
                    "donation would also delete the arena's view), and fn would write the "
                    "copy, not the arena's bytes. Pass the view as a plain input (read in "
                    "place, zero-copy), or alias an array JAX owns (jnp.array(view))"
                )
        return self._call(*inputs)
