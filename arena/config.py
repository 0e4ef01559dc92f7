"""Validation of :class:`arena.Arena`'s settings, the choice of memory source and of the
default framework, and the loading of a framework's adapter."""

from __future__ import annotations

import importlib
import importlib.util
import operator
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from arena.base.events import debug_from_env
from arena.base.layout import MAX_BYTES, check_alignment, int_not_bool, plain_int_fix
from arena.base.poison import poison_from_env
from arena.environment import FALSE_WORDS, TRUE_WORDS, choice_from_env
from arena.errors import ConfigError, DeviceUnavailableError, FrameworkUnavailableError
from arena.memory.devices import (
    Device,
    cupy_device_count,
    default_device,
    parse_device,
    torch_device_count,
)
from arena.memory.sources import MemorySource

__all__ = [
    "FRAMEWORKS",
    "HOST_SOURCES",
    "MAX_SLOTS",
    "Settings",
    "check_flag",
    "check_framework",
    "check_growth",
    "check_inference",
    "check_name",
    "check_path",
    "host_source_from_env",
    "load_adapter",
    "make_source",
    "max_bytes_from_env",
    "parse_bytes",
    "pick_framework",
    "positive",
    "settings",
]

#: Framework names an arena can hand out views in.
FRAMEWORKS = ("numpy", "torch", "cupy", "jax")


@dataclass(frozen=True, slots=True)
class Settings:
    """An arena's validated settings (see :class:`arena.Arena` for each)."""

    ubatches: int
    lanes: int
    alignment: int
    growth: str | int
    max_cached: int
    debug: bool
    cached_views: bool
    track_sites: bool
    source: MemorySource
    capture_probe: Callable[[], bool] | None
    poison: bool
    max_bytes: int | None = None
    inference_views: bool = False

    def inference_for(self, framework: str) -> bool:
        """Whether ``framework``'s views are inference arrays by default: torch's, in an
        arena made with ``inference_views=True`` (other frameworks have none)."""
        return self.inference_views and framework == "torch"


def settings(
    device: Any,
    *,
    ubatches: Any,
    lanes: Any,
    alignment: Any,
    growth: Any,
    source: Any,
    ubatch_resolver: Any,
    lane_resolver: Any,
    alloc_context: Any,
    debug: Any,
    max_cached_layouts: Any,
    cached_views: Any,
    track_call_sites: Any,
    capture_probe: Any,
    poison: Any,
    max_bytes: Any = None,
    inference_views: Any = False,
) -> Settings:
    """Validate :class:`arena.Arena`'s arguments, in the order of its signature, and make
    its memory source (and, for a CUDA arena without one, its capture probe).

    Raises
    ------
    ConfigError
        Naming the first bad argument.
    """
    ubatches = positive("ubatches", ubatches)
    lanes = positive("lanes", lanes)
    if ubatches * lanes > MAX_SLOTS:
        raise ConfigError(
            f"ubatches={ubatches} x lanes={lanes} makes {ubatches * lanes} slots, more than "
            f"the {MAX_SLOTS} an arena holds; a slot is one concurrently running thread's "
            "buffer, so use one per overlapped micro-batch and lane"
        )
    alignment = check_alignment(alignment)
    growth = check_growth(growth)
    max_cached = positive("max_cached_layouts", max_cached_layouts)
    for name, hook, returns in (
        ("ubatch_resolver", ubatch_resolver, "an int"),
        ("lane_resolver", lane_resolver, "an int"),
        ("alloc_context", alloc_context, "a context manager"),
        ("capture_probe", capture_probe, "a bool"),
    ):
        if hook is not None and not callable(hook):
            raise ConfigError(f"{name} must be a callable returning {returns}, got {hook!r}")
    debug = debug_from_env() if debug is None else check_flag("debug", debug)
    cached_views = check_flag("cached_views", cached_views)
    inference_views = check_flag("inference_views", inference_views)
    track_sites = check_flag("track_call_sites", track_call_sites)
    cap = max_bytes_from_env() if max_bytes is None else parse_bytes("max_bytes", max_bytes)
    source_object = make_source(device, source, cap, alignment)
    if capture_probe is None and source_object.device.is_cuda:
        from arena.memory.capture import capture_probe as cuda_capture_probe

        capture_probe = cuda_capture_probe(source_object.device)
    poison = poison_from_env() if poison is None else check_flag("poison", poison)
    return Settings(
        ubatches,
        lanes,
        alignment,
        growth,
        max_cached,
        debug,
        cached_views,
        track_sites,
        source_object,
        capture_probe,
        poison,
        cap,
        inference_views,
    )


def positive(name: str, value: Any) -> int:
    """``value`` if it is an int >= 1; otherwise :class:`ConfigError` naming ``name``."""
    if not int_not_bool(value) or value < 1:
        # A NumPy integer or whole float is told to pass int() of it; anything else, the range.
        fix = plain_int_fix(value) or f"; pass an int of 1 or more, e.g. {name}=1"
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}{fix}")
    return value


#: Most slots (ubatches x lanes) one arena holds.
MAX_SLOTS = 4096


def check_path(name: str, value: Any) -> Any:
    """``value`` if it is None or a non-empty path (str or os.PathLike).

    Raises
    ------
    ConfigError
        Naming the argument and what it got.
    """
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and str(os.fspath(value)).strip():
        return value
    raise ConfigError(
        f"{name} must be a file path (str or os.PathLike), got {type(value).__name__} "
        f"{value!r}; pass e.g. {name}='arena-{name.replace('_', '-')}'"
    )


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_name(value: Any) -> str | None:
    """``value`` if it is None or an arena name: 1 to 64 letters, digits, ``_`` or ``-``,
    starting with a letter or digit (it becomes part of a profile's file name).

    Raises
    ------
    ConfigError
        Naming what it got and an example.
    """
    if value is None or (isinstance(value, str) and _NAME.fullmatch(value)):
        return value
    raise ConfigError(
        f"name must be 1 to 64 letters, digits, '_' or '-' (starting with a letter or "
        f"digit), got {type(value).__name__} {value!r}; pass e.g. name='engine'"
    )


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool; otherwise :class:`ConfigError` (``"false"`` is truthy)."""
    if value is True or value is False:
        return value
    # What the value was meant to say: a yes/no word says it ("false" is truthy, but
    # meant False), anything else by its truth.
    word = value.strip().lower() if isinstance(value, str) else None
    try:
        meant = word in TRUE_WORDS if word in TRUE_WORDS | FALSE_WORDS else bool(value)
    except Exception:  # an array's truth is ambiguous: any fix is a guess
        meant = True
    raise ConfigError(
        f"{name} must be True or False, got {type(value).__name__} {value!r}; "
        f"pass {name}={meant} (a string such as 'false' is not a bool)"
    )


def check_growth(growth: Any) -> str | int:
    """Validate the growth policy: ``"exact"``, ``"pow2"`` or a positive int."""
    if growth in ("exact", "pow2"):
        return str(growth)
    if int_not_bool(growth) and growth >= 1:
        return growth
    raise ConfigError(
        f"growth must be 'exact', 'pow2' or a positive int granularity in bytes, got "
        f"{growth!r}{plain_int_fix(growth)}"
    )


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}

# ASCII only: str.isdigit and int() take other scripts' digits (full-width, Arabic-Indic), and
# case folding without re.ASCII takes the Kelvin sign for a 'k'.
_BYTE_COUNT = re.compile(r"\s*([0-9]+)\s*(b|kib|mib|gib|tib)?\s*", re.ASCII | re.IGNORECASE)


def parse_bytes(name: str, value: Any) -> int:
    """A byte count from 1 to 2**63 - 1: an int, or a string of ASCII digits with an
    optional binary unit (``"4GiB"``, ``"512 MiB"``, ``"1048576"``; ``B``, ``KiB``,
    ``MiB``, ``GiB``, ``TiB``, any case), with ASCII blanks before, between and after
    them only. Underscores, signs, decimal points, blanks inside the number, digits of
    other scripts and other spaces are refused.

    Raises
    ------
    ConfigError
        Naming ``name``, the value and the accepted forms, or the limit it is past.
    """
    number: int | None = None
    if isinstance(value, str):
        match = _BYTE_COUNT.fullmatch(value)
        if match is not None:
            digits = match.group(1).lstrip("0") or "0"
            scale = _UNITS[(match.group(2) or "").lower()]
            # More digits than the limit has: past it, whatever they are (and int() of
            # thousands of digits is refused by Python itself).
            number = None if len(digits) > len(str(MAX_BYTES)) else int(digits) * scale
            if number is None:
                raise _past_the_limit(name, value, None)
    elif int_not_bool(value):
        number = operator.index(value)  # an int subclass: its plain value
    if number is None or number < 1:
        why = ""
        if isinstance(value, str) and value.strip()[-2:].lower() in {"kb", "mb", "gb", "tb"}:
            why = (
                f"; {value.strip()[-2:]!r} is ambiguous (arena prints MiB as 'MB', as vLLM "
                "does, while 'MB' is also 10**6 bytes): write MiB, or the bytes"
            )
        raise ConfigError(
            f"{name} must be a number of bytes >= 1 (an int, or a string of ASCII digits "
            f"such as '4GiB', '512MiB' or '1048576'; units KiB, MiB, GiB, TiB), got "
            f"{_shown(value)}{why}{plain_int_fix(value)}"
        )
    if number > MAX_BYTES:
        raise _past_the_limit(name, value, number)
    return number


def _past_the_limit(name: str, value: Any, number: int | None) -> ConfigError:
    bytes_ = f" ({number} bytes)" if isinstance(value, str) and number is not None else ""
    return ConfigError(
        f"{name} is {_shown(value)}{bytes_}, past the limit of {MAX_BYTES} bytes "
        "(2**63 - 1) a buffer can address; give at most that, or no cap at all"
    )


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a value may be thousands of digits)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:45]}... ({len(text)} characters)"


def max_bytes_from_env(variable: str = "ARENA_MAX_BYTES") -> int | None:
    """The cap named by the environment variable (see :func:`parse_bytes`), or None.

    Raises
    ------
    ConfigError
        Naming the variable, when it is set to something that is not a byte count.
    """
    value = os.environ.get(variable, "")
    # Only ASCII blanks make it unset: parse_bytes refuses other spaces (no-break, ...).
    blank = not value.strip(" \t\n\r\f\v")
    return None if blank else parse_bytes(f"the environment variable {variable}", value)


#: Values of ``ARENA_SOURCE``: the default source of host arenas.
HOST_SOURCES = ("host", "virtual")


def host_source_from_env(variable: str = "ARENA_SOURCE") -> str:
    """The default source of host arenas named by the environment variable: ``"host"``
    (also when unset or blank) or ``"virtual"``, in any case (read as every ``ARENA_*``
    variable is: :func:`arena.environment.choice_from_env`).

    Raises
    ------
    ConfigError
        Naming the variable, its value and the accepted ones.
    """
    return choice_from_env(variable, HOST_SOURCES, "the default source of host arenas")


def make_source(
    device: Any, source: Any, max_bytes: int | None = None, alignment: int = 0
) -> MemorySource:
    """The memory source for ``device`` and ``source`` (see :class:`arena.Arena`): a
    :class:`MemorySource` as it is, an object with RMM's ``allocate``/``deallocate``
    wrapped in :class:`~arena.memory.rmm.RmmSource`, or a built-in source's name.
    ``max_bytes`` is the reservation of ``"virtual"`` (None: the device's default).
    The default source of host arenas is ``ARENA_SOURCE`` (``"host"`` when unset).
    ``alignment``: the arena's; a built-in host source named here starts its blocks at
    a multiple of it where it exceeds a page (so views' addresses are multiples of it,
    not only their offsets), and a host source object that aligns less is refused.

    Raises
    ------
    ConfigError
        A bad source, or a host source object aligning its blocks to less than
        ``alignment``."""
    if source is not None and not isinstance(source, str):
        if not isinstance(source, MemorySource):
            from arena.memory.rmm import RmmSource, has_rmm_protocol

            if not has_rmm_protocol(source):
                raise ConfigError(
                    f"source must provide device, allocate(nbytes) and release(allocation), "
                    f"or RMM's allocate(nbytes, stream) and deallocate(ptr, nbytes, stream); "
                    f"got {type(source).__name__}"
                )
            resolved = default_device() if device is None else parse_device(device)
            return RmmSource(source, resolved)
        if device is not None and parse_device(device) != source.device:
            raise ConfigError(
                f"device={device!r} disagrees with the source's device {source.device}; "
                "pass only one of them"
            )
        _check_host_alignment(source, alignment)
        return source
    resolved = default_device() if device is None else parse_device(device)
    if source is None and not resolved.is_cuda:  # read only where it decides
        source = host_source_from_env()
    if source == "virtual":
        if resolved.is_cuda:
            from arena.memory.cudavm import VirtualCudaSource

            return VirtualCudaSource(resolved, reserve=max_bytes)
        from arena.memory.virtual import VirtualHostSource

        return VirtualHostSource(reserve=max_bytes, alignment=alignment)
    if not resolved.is_cuda:
        if source in (None, "host"):
            from arena.memory.sources import HOST_ALIGNMENT, AlignedHostSource, HostSource

            return AlignedHostSource(alignment) if alignment > HOST_ALIGNMENT else HostSource()
        if source == "pinned":
            from arena.memory.cuda import PinnedSource

            return PinnedSource()
        raise ConfigError(
            f"source={source!r} is not a host source; on device {resolved} use 'host' "
            "(default), 'virtual' or 'pinned', or a CUDA device for 'device', 'pool' or 'torch'"
        )
    from arena.memory.cuda import cuda_source

    kind = source or _default_cuda_source(resolved)
    return _naming_spelling(device, resolved, lambda: cuda_source(resolved, kind))


def _naming_spelling(
    device: Any, resolved: Device, make: Callable[[], MemorySource]
) -> MemorySource:
    """``make()``, the source of CUDA device ``resolved``; where ``device`` is missing, the
    error names ``device`` as the caller spelled it too, when that is not how ``resolved``
    prints (``Arena("gpu")`` is cuda:0: "cuda:0 (device='gpu') is not available ...").

    Raises
    ------
    DeviceUnavailableError
        The source's, naming ``device``; chained to the source's own.
    """
    try:
        return make()
    except DeviceUnavailableError as exc:
        if str(device) == str(resolved):
            raise
        spelled = f"{resolved} (device={device!r})"
        raise DeviceUnavailableError(str(exc).replace(str(resolved), spelled)) from exc


def _check_host_alignment(source: MemorySource, alignment: int) -> None:
    """Refuse a built-in host source object whose blocks start at multiples of less than
    the arena's ``alignment``: its views' offsets would be multiples of it, their
    addresses not.

    Raises
    ------
    ConfigError
        Naming the source, its alignment, the arena's and the fix.
    """
    from arena.memory.sources import HostSource
    from arena.memory.virtual import VirtualHostSource

    if not isinstance(source, HostSource | VirtualHostSource):
        return  # its alignment is its own contract (MemorySource.allocate: >= 256)
    most = source.alignment  # a HostSource's is a page, an AlignedHostSource's its own
    if alignment > most:
        raise ConfigError(
            f"alignment={alignment} is more than {source!r} aligns its blocks to ({most} "
            f"bytes): views' addresses would not be multiples of it. Pass alignment <= "
            f"{most}, or let the arena make its host source (source='host' or 'virtual', "
            "which align to the arena's alignment)"
        )


#: Other spellings of a framework's name, for the hint of an unknown one (never accepted:
#: one name per framework keeps the fronts and the settings one key each).
_FRAMEWORK_SPELLINGS = {"np": "numpy", "pytorch": "torch", "pt": "torch", "jnp": "jax"}


def check_framework(framework: str) -> str:
    """``framework`` if it is one of :data:`FRAMEWORKS`; otherwise :class:`ConfigError`,
    naming the name to use where ``framework`` is another spelling of one (``'NumPy'``,
    ``'np'``, ``'pytorch'``) or the framework's module itself."""
    if framework not in FRAMEWORKS:
        choices = ", ".join(FRAMEWORKS)
        if isinstance(framework, ModuleType):
            module = framework.__name__
            root = module.partition(".")[0]
            root = "jax" if root == "jaxlib" else root
            fix = f"pass its name, {root!r}" if root in FRAMEWORKS else f"choose one of {choices}"
            raise ConfigError(f"framework must be a name, got the module {module}; {fix}")
        name = framework.strip().lower() if isinstance(framework, str) else None
        meant = name if name in FRAMEWORKS else _FRAMEWORK_SPELLINGS.get(name or "")
        hint = f" (for {framework!r} write {meant!r})" if meant else ""
        raise ConfigError(f"unknown framework {framework!r}; choose one of {choices}{hint}")
    return framework


#: Frameworks that can view only one kind of memory: "cpu" (host) or "cuda".
_MEMORY_OF = {"numpy": "cpu", "cupy": "cuda"}


def pick_framework(framework: str | None, device: Device) -> str:
    """The framework of an arena's default views (see ``Arena(framework=...)``).

    Raises
    ------
    ConfigError
        For an unknown framework, or one that cannot view ``device``'s memory (checked
        here, at construction, without importing the framework).
    """
    if framework is not None:
        framework = check_framework(framework)
        kind = _MEMORY_OF.get(framework)
        if kind is not None and kind != device.kind:
            other = "numpy" if framework == "cupy" else "cupy"
            raise ConfigError(
                f"framework={framework!r} cannot view {device} memory: "
                + (
                    "CuPy views device memory only"
                    if framework == "cupy"
                    else "NumPy views host memory only"
                )
                + f"; use framework='torch' or {other!r} for this arena, or make the arena "
                f"on {'a CUDA device' if framework == 'cupy' else 'the host'}"
            )
        return framework
    if "torch" in sys.modules:
        return "torch"
    if not device.is_cuda:
        return "numpy"
    # A GPU that only torch sees (CuPy not installed) is served through torch.
    return "cupy" if importlib.util.find_spec("cupy") is not None else "torch"


def _default_cuda_source(device: Device) -> str:
    """``"device"`` (cudaMalloc through CuPy), or ``"torch"`` where only torch sees ``device``.

    So ``Arena("cuda:0")`` works with torch alone (``pip install -e ".[torch]"``).
    """
    if cupy_device_count() > device.index or torch_device_count() <= device.index:
        return "device"  # CuPy serves it, or nothing does and "device" explains what to install
    return "torch"


def check_inference(framework: str, inference: Any) -> bool:
    """``inference`` (a bool) for a front of ``framework`` (a known one).

    Raises
    ------
    ConfigError
        ``inference`` is not a bool, or True for another framework than torch: inference
        tensors are torch's (``torch.inference_mode()``); NumPy, CuPy and JAX arrays have
        no such mode.
    """
    wanted = check_flag("inference", inference)
    if wanted and framework != "torch":
        raise ConfigError(
            f"inference=True is for torch fronts only (torch inference tensors, made inside "
            f"torch.inference_mode()); {framework} arrays have no inference mode: use "
            f"ws.front({framework!r}) without it, or ws.front('torch', inference=True)"
        )
    return wanted


def load_adapter(framework: str, device: Device, inference: bool = False) -> Any:
    """The adapter of ``framework`` (``arena.adapters.<framework>.ADAPTER``, an
    :class:`arena.adapters.base.Adapter`), checked to view ``device``'s memory; with
    ``inference``, its adapter of inference-mode arrays (``ADAPTER.for_inference()``: torch's
    inference tensors; the caller checked the framework is torch, :func:`check_inference`).

    Raises
    ------
    FrameworkUnavailableError
        If the framework is not installed or cannot view this device's memory.
    """
    if framework == "cupy" and not device.is_cuda:  # before the import: installing CuPy
        raise FrameworkUnavailableError(  # would not help a host arena
            f"CuPy views need a CUDA arena: this arena's memory is on the host ({device}), "
            "which CuPy arrays cannot view; use ws.numpy or ws.torch for this arena, or "
            "make the arena on a CUDA device"
        )
    try:
        module = importlib.import_module(f"arena.adapters.{framework}")
    except FrameworkUnavailableError:
        raise  # the adapter's own message already says what to install
    except ImportError as exc:
        raise FrameworkUnavailableError(
            f"the {framework} front needs {framework}, which cannot be imported "
            f"({exc}); install it (pip install {framework}) or use another front"
        ) from exc
    adapter = module.ADAPTER.for_inference() if inference else module.ADAPTER
    adapter.check_device(device)
    return adapter
