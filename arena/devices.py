"""Device specifications: ``"cpu"``, ``"cuda:1"``, ints, torch and CuPy devices.

Parsing never imports a framework: torch devices are read through ``str()`` and CuPy
devices through their ``id``. Only :func:`default_device` may import CuPy, to ask whether a
GPU is usable, and it does so once per process.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any

from .errors import DeviceError

__all__ = ["CPU", "Device", "cuda_device_count", "default_device", "parse_device"]


@dataclass(frozen=True, slots=True)
class Device:
    """Where an arena's memory lives.

    Attributes
    ----------
    kind : str
        ``"cpu"`` (host memory) or ``"cuda"``.
    index : int
        Device ordinal; always 0 for the host.
    """

    kind: str
    index: int = 0

    @property
    def is_cuda(self) -> bool:
        """Whether this is a CUDA device."""
        return self.kind == "cuda"

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


CPU = Device("cpu", 0)

_HOST_NAMES = {"cpu", "host", "numpy"}


def parse_device(device: Any) -> Device:
    """Turn a device specification into a :class:`Device`.

    Parameters
    ----------
    device : Device, str, int, torch.device or cupy.cuda.Device
        ``"cpu"``/``"host"``, ``"cuda"`` (ordinal 0), ``"cuda:N"``, ``N`` (CUDA ordinal),
        a torch device or a CuPy device. ``None`` is not accepted here: see
        :func:`default_device`.

    Raises
    ------
    DeviceError
        With the value received and the accepted forms.
    """
    if isinstance(device, Device):
        return device
    if isinstance(device, bool):
        raise DeviceError(_message(device))
    if isinstance(device, int):
        return _cuda(device, device)
    kind = type(device)
    if kind.__module__ == "torch" and kind.__name__ == "device":
        return parse_device(str(device))
    if kind.__module__.startswith("cupy") and isinstance(getattr(device, "id", None), int):
        return _cuda(device.id, device)
    if isinstance(device, str):
        text = device.strip().lower()
        if text in _HOST_NAMES:
            return CPU
        if text in {"cuda", "gpu"}:
            return Device("cuda", 0)
        for prefix in ("cuda:", "gpu:"):
            if text.startswith(prefix) and text[len(prefix) :].isdigit():
                return Device("cuda", int(text[len(prefix) :]))
    raise DeviceError(_message(device))


def _cuda(index: int, original: Any) -> Device:
    if index < 0:
        raise DeviceError(f"CUDA device ordinal must be >= 0, got {original!r}; use e.g. 0")
    return Device("cuda", index)


def _message(device: Any) -> str:
    return (
        f"cannot understand device {device!r} ({type(device).__name__}); use 'cpu', 'cuda', "
        "'cuda:N', an int ordinal, a torch.device or a cupy.cuda.Device"
    )


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices CuPy can use (0 without CuPy or without a driver).

    Cached for the process: the answer does not change while it runs.
    """
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device, broken install: all mean "no usable GPU"
        return 0


def default_device() -> Device:
    """The device used when none is given: CUDA device 0 when CuPy sees one, else the host."""
    return Device("cuda", 0) if cuda_device_count() > 0 else CPU
