"""Validation of :class:`arena.Arena`'s settings and the choice of memory source."""

from __future__ import annotations

from typing import Any

from .devices import Device, cupy_device_count, default_device, parse_device, torch_device_count
from .errors import ConfigError
from .sources import MemorySource

__all__ = ["check_flag", "check_growth", "make_source", "positive"]


def positive(name: str, value: Any) -> int:
    """``value`` if it is an int >= 1; otherwise :class:`ConfigError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool; otherwise :class:`ConfigError` (``"false"`` is truthy)."""
    if value is True or value is False:
        return value
    raise ConfigError(
        f"{name} must be True or False, got {type(value).__name__} {value!r}; "
        f"pass {name}={'True' if value else 'False'} (a string such as 'false' is not a bool)"
    )


def check_growth(growth: Any) -> str | int:
    """Validate the growth policy: ``"exact"``, ``"pow2"`` or a positive int."""
    if growth in ("exact", "pow2"):
        return str(growth)
    if isinstance(growth, int) and not isinstance(growth, bool) and growth >= 1:
        return growth
    raise ConfigError(
        f"growth must be 'exact', 'pow2' or a positive int granularity in bytes, got {growth!r}"
    )


def make_source(device: Any, source: MemorySource | str | None) -> MemorySource:
    """The memory source for ``device`` and ``source`` (see :class:`arena.Arena`)."""
    if source is not None and not isinstance(source, str):
        if not isinstance(source, MemorySource):
            raise ConfigError(
                f"source must provide device, allocate(nbytes) and release(allocation); "
                f"got {type(source).__name__}"
            )
        if device is not None and parse_device(device) != source.device:
            raise ConfigError(
                f"device={device!r} disagrees with the source's device {source.device}; "
                "pass only one of them"
            )
        return source
    resolved = default_device() if device is None else parse_device(device)
    if not resolved.is_cuda:
        if source in (None, "host"):
            from .sources import HostSource

            return HostSource()
        if source == "pinned":
            from .cuda import PinnedSource

            return PinnedSource()
        raise ConfigError(
            f"source={source!r} is not a host source; on device {resolved} use 'host' "
            "(default) or 'pinned', or a CUDA device for 'device', 'pool' or 'torch'"
        )
    from .cuda import cuda_source

    return cuda_source(resolved, source or _default_cuda_source(resolved))


def _default_cuda_source(device: Device) -> str:
    """``"device"`` (cudaMalloc through CuPy), or ``"torch"`` where only torch sees ``device``.

    So ``Arena("cuda:0")`` works with torch alone (``pip install cupy-arena torch``).
    """
    if cupy_device_count() > device.index or torch_device_count() <= device.index:
        return "device"  # CuPy serves it, or nothing does and "device" explains what to install
    return "torch"
