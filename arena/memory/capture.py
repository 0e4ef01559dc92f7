"""The check that refuses memory work while a CUDA graph is being captured: a probe of the
current CuPy and torch streams, made once per CUDA arena.

:mod:`arena.memory.cuda` re-exports :func:`capture_probe` and :func:`check_not_capturing`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from arena.errors import GraphCaptureError
from arena.memory.devices import Device, cupy_device_count

__all__ = [
    "CAPTURE_ERRORS",
    "capture_error",
    "capture_probe",
    "check_not_capturing",
    "is_capture_error",
]

#: cudaErrorStreamCaptureUnsupported (900) to cudaErrorStreamCaptureWrongThread (908): every
#: error that means "this call collided with a stream capture".
CAPTURE_ERRORS = range(900, 909)


def is_capture_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error caused by a stream capture (CuPy or torch)."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status in CAPTURE_ERRORS
    return isinstance(exc, RuntimeError) and "captur" in str(exc).lower()


def capture_error(device: Device, what: str, detail: str) -> GraphCaptureError:
    """The error for ``what`` on ``device`` refused because of a capture (``detail``)."""
    return GraphCaptureError(
        f"{what} on {device} was requested while {detail}; memory work now would corrupt "
        "the capture. Run the same step once eagerly (warm-up) before capturing, or "
        "reserve() the size before capture"
    )


def capture_probe(device: Device) -> Callable[[], bool]:
    """A cheap callable saying whether memory work on ``device`` would now hit a capture.

    Make it once per CUDA arena; call it on slow paths and per request. ``True`` when, on
    the calling thread,

    - CuPy's current stream for ``device`` is capturing, including the legacy default
      stream while any *blocking* stream on the device captures (CUDA answers
      cudaErrorStreamCaptureImplicit there, without invalidating that capture);
    - torch's current stream for ``device`` is capturing (asked only when torch is imported
      and its CUDA state is initialised: otherwise torch cannot be capturing);
    - either query fails with a capture error (cudaErrorStreamCapture*, numbers 900-908),
      as a query can while another thread's global-mode capture forbids it.

    It never raises for a capture: those errors mean ``True``; other CUDA errors propagate.
    A global-mode capture on another thread on a non-blocking stream cannot be seen by any
    query that does not disturb it; the allocation then fails, and the sources report that
    as :class:`~arena.errors.GraphCaptureError`.

    Cost: without a GPU framework in use, a dictionary look-up and
    ``torch.cuda.is_initialized()`` (well under 1 µs); with one, a current-stream look-up
    and one ``cudaStreamIsCapturing`` per framework (a few µs; not yet measured on a GPU).
    CuPy, where it sees the device, is imported when the probe is made; torch is looked up
    at each call, so a torch imported later is still asked.
    """
    index = device.index
    cupy: Any = None
    if importlib.util.find_spec("cupy") is not None and cupy_device_count() > index:
        cupy = importlib.import_module("cupy")
    # Device-relative stream handles: the null, legacy and per-thread default streams.
    default_streams = (0, 1, 2)

    def probe() -> bool:
        handle = -1
        if cupy is not None:
            runtime = cupy.cuda.runtime
            try:
                handle = cupy.cuda.get_current_stream(index).ptr
                if handle in default_streams and runtime.getDevice() != index:
                    with cupy.cuda.Device(index):
                        status = runtime.streamIsCapturing(handle)
                else:
                    status = runtime.streamIsCapturing(handle)
            except runtime.CUDARuntimeError as exc:
                if is_capture_error(exc):
                    return True
                raise
            if status:
                return True
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return False
        try:
            if torch.cuda.current_stream(index).cuda_stream == handle:
                return False  # the stream CuPy just answered for
            if torch.cuda.current_device() == index:
                return bool(torch.cuda.is_current_stream_capturing())
            with torch.cuda.device(index):
                return bool(torch.cuda.is_current_stream_capturing())
        except RuntimeError as exc:
            if is_capture_error(exc):
                return True
            raise

    return probe


def check_not_capturing(device: Device, what: str) -> None:
    """Refuse memory work while a stream on ``device`` captures a CUDA graph.

    A cudaMalloc (or free) during capture corrupts it. Makes a fresh :func:`capture_probe`
    each call: an arena should make its probe once and keep it.

    Raises
    ------
    GraphCaptureError
        Naming the device and what was asked for.
    """
    if capture_probe(device)():
        raise capture_error(device, what, "a stream is capturing a CUDA graph")
