"""Device specifications: ``"cpu"``, ``"cuda:1"``, ints, torch and CuPy devices.

Parsing never imports a framework: torch devices are read through ``str()`` and CuPy
devices through their ``id``. Only counting devices (:func:`cuda_device_count`, used by
:func:`default_device`) imports a framework: CuPy, and torch only where CuPy is missing or
torch is already imported. Each answer is cached for the process.
"""

from __future__ import annotations

import functools
import importlib.util
import operator
import sys
from dataclasses import dataclass
from typing import Any

from arena.errors import DeviceError

__all__ = [
    "CPU",
    "Device",
    "cuda_device_count",
    "cuda_unavailable_reason",
    "cupy_device_count",
    "default_device",
    "forget_device_counts",
    "parse_device",
    "torch_device_count",
]


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
    if kind.__module__.startswith("cupy") and isinstance(getattr(device, "id", None), int):
        return _cuda(device.id, device)
    if kind.__module__ == "torch" and kind.__name__ == "device":
        text = str(device)  # parsed as its text; the errors name the torch.device
    elif isinstance(device, str):
        text = device
    else:
        raise DeviceError(_message(device))
    text = text.strip().lower()
    if text in _HOST_NAMES:
        return CPU
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts.
    host, _, ordinal = text.partition(":")
    if host in _HOST_NAMES and ordinal.isdecimal():
        if _ordinal(ordinal, device) == 0:
            return CPU  # torch.device("cpu", 0) prints as "cpu:0"
        raise DeviceError(f"the host is one device, got {device!r}; use 'cpu' (or 'cpu:0')")
    if text in {"cuda", "gpu"}:
        return Device("cuda", 0)
    for prefix in ("cuda:", "gpu:"):
        rest = text[len(prefix) :]
        digits = rest.removeprefix("-")
        if text.startswith(prefix) and digits.isdecimal():
            index = _ordinal(digits, device)
            if digits != rest:  # 'cuda:-1': refused as the int -1 is, not as unreadable
                raise DeviceError(_negative(device))
            return Device("cuda", index)
    raise DeviceError(_message(device))


def _ordinal(digits: str, device: Any) -> int:
    """The ordinal ``digits`` (decimal) of ``device`` spell.

    Raises
    ------
    DeviceError
        Where int() refuses them: more digits than ``sys.get_int_max_str_digits()``.
    """
    try:
        return int(digits)
    except ValueError:
        shown = f"{str(device)[:24]!r}..."  # its thousands of digits are not repeated
        raise DeviceError(
            f"cannot understand device {shown} ({type(device).__name__}): its ordinal has "
            f"{len(digits)} digits, more than int() reads; use 'cuda:N' with a device's "
            "ordinal, e.g. 'cuda:0'"
        ) from None


def _cuda(index: int, original: Any) -> Device:
    if index < 0:
        raise DeviceError(_negative(original))
    return Device("cuda", index)


def _negative(original: Any) -> str:
    """The refusal of ``original``, a negative CUDA ordinal (-1, 'cuda:-1')."""
    return f"CUDA device ordinal must be >= 0, got {original!r}; use e.g. 0"


def _message(device: Any) -> str:
    ordinal = None
    if not isinstance(device, bool):  # refused as itself: True is no device
        try:
            ordinal = operator.index(device)  # a NumPy integer, say: an ordinal, not an int
        except Exception:  # whatever its __index__ raises: not an ordinal
            ordinal = None
    if ordinal is not None and ordinal >= 0:
        return (
            f"cannot understand device {device!r} ({type(device).__name__}): an ordinal "
            f"must be a Python int; pass int() of it ({ordinal}), or 'cuda:{ordinal}'"
        )
    return (
        f"cannot understand device {device!r} ({type(device).__name__}); use 'cpu', 'cuda', "
        "'cuda:N', an int ordinal, a torch.device or a cupy.cuda.Device"
    )


def cuda_device_count() -> int:
    """Number of usable CUDA devices: CuPy's count, else torch's.

    CuPy is asked first. torch is asked when CuPy is not installed or sees no device, but
    only if torch is already imported or CuPy is missing: counting devices never imports
    torch just to ask (CuPy's answer is enough where CuPy is installed and torch unused).
    Each framework's answer is cached for the process.

    Errors that mean "no usable GPU" (no driver, no device, a driver too old for the CUDA
    runtime, a CuPy build that cannot load its CUDA libraries) count as 0 devices and are
    kept: :func:`cuda_unavailable_reason` says which. Anything else, such as a warning
    turned into an error by ``-W error``, propagates instead of silently meaning "no GPU".
    """
    count = cupy_device_count()
    if count == 0 and ("torch" in sys.modules or importlib.util.find_spec("cupy") is None):
        count = torch_device_count()
    return count


def cuda_unavailable_reason() -> str | None:
    """Why :func:`cuda_device_count` found no device (``None`` when it found one).

    Asks for the count first, so this always describes the current answer.
    """
    if cuda_device_count() > 0:
        return None
    reasons = [_REASONS[name] for name in ("cupy", "torch") if name in _REASONS]
    return "; ".join(reasons) or "no framework that can count CUDA devices was asked"


def default_device() -> Device:
    """The device used when none is given: CUDA device 0 when CuPy or torch sees one, else
    the host."""
    return Device("cuda", 0) if cuda_device_count() > 0 else CPU


#: Why each framework counted no device, filled in by the counting functions.
_REASONS: dict[str, str] = {}


def forget_device_counts() -> None:
    """Count CUDA devices afresh at the next call: the counts are cached for the process
    (a count imports CuPy or torch); after the visible devices changed, or in a test that
    stands in for a framework, forget them and the reasons none was found."""
    cupy_device_count.cache_clear()
    torch_device_count.cache_clear()
    _REASONS.clear()


@functools.cache
def cupy_device_count() -> int:
    """Number of CUDA devices CuPy can use; 0 without CuPy or without a usable GPU."""
    if importlib.util.find_spec("cupy") is None:
        _REASONS["cupy"] = "CuPy is not installed"
        return 0
    try:
        import cupy
    except ImportError as exc:  # e.g. a CuPy wheel whose CUDA libraries cannot be loaded
        _REASONS["cupy"] = f"CuPy cannot be imported: {exc}"
        return 0
    runtime = cupy.cuda.runtime
    try:
        count = int(runtime.getDeviceCount())
    except runtime.CUDARuntimeError as exc:  # no driver, no device, driver too old
        _REASONS["cupy"] = f"CuPy sees no CUDA device: {exc}"
        return 0
    if count == 0:
        _REASONS["cupy"] = "CuPy sees no CUDA device"
    return count


@functools.cache
def torch_device_count() -> int:
    """Number of CUDA devices torch can use; 0 without torch or without a usable GPU.

    Imports torch if it is installed: :func:`cuda_device_count` calls this only when torch
    is already imported or CuPy is missing.
    """
    if importlib.util.find_spec("torch") is None:
        _REASONS["torch"] = "torch is not installed"
        return 0
    import torch

    if not torch.cuda.is_available():  # CPU-only build, no driver or no device
        build = torch.version.cuda
        _REASONS["torch"] = f"torch {torch.__version__} sees no CUDA device" + (
            "" if build else " (a CPU-only build)"
        )
        return 0
    return int(torch.cuda.device_count())
