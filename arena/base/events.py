"""Logging, debug switches and caller attribution: the call site of an event, and the
request log, which keeps per call site the peak bytes requested.

Everything here runs on slow paths only (growth, lock, unlocked bookkeeping).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from arena.environment import flag_from_env
from arena.errors import ArenaWarning
from arena.forks import after_fork

__all__ = [
    "MB",
    "ArenaEvent",
    "RequestLog",
    "RequestRecorder",
    "caller_info",
    "caller_memos",
    "debug_from_env",
    "format_mb",
    "log_event",
    "logger",
    "warn_user",
]

logger = logging.getLogger("arena")
MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ArenaEvent:
    """What listeners registered with :meth:`arena.Arena.add_listener` receive.

    Attributes
    ----------
    kind : str
        ``"resize"``, ``"lock"``, ``"unlock"`` or ``"close"``; ``"workspace"`` when a
        library workspace is created or grows, ``"triton"`` when a Triton block is;
        ``"locked_growth"`` for a growth in place while locked (after its ``"resize"``),
        ``"sleep"`` (``old_bytes``: the bytes released) and ``"wake"`` (``new_bytes``).
    caller : str
        ``file:line:function`` of the first frame outside arena.
    slot : tuple of int or None
        ``(ubatch, lane)`` for a resize, locked growth or workspace event; None otherwise.
    old_bytes, new_bytes : int
        Slot capacity (or the workspace's bytes) before and after (0 for other events).
    sizes : tuple of int
        Every slot's capacity after the event, ubatch-major.
    key : object
        The library workspace's key, or the Triton block's stream; None for other events.
    """

    kind: str
    caller: str
    slot: tuple[int, int] | None
    old_bytes: int
    new_bytes: int
    sizes: tuple[int, ...]
    key: object = None


_internal_dirs: tuple[str, ...] | None = None
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
# Files inside the package that play user code (their frames are the callers to name).
_CONSUMER_FILES = (str(_PACKAGE_DIR / "tools" / "demo.py"),)


def format_mb(nbytes: int) -> str:
    """Bytes as ``"12.50 MB"`` (MiB, as vLLM prints them)."""
    return f"{nbytes / MB:.2f} MB"


def debug_from_env(variable: str = "ARENA_DEBUG") -> bool:
    """Whether the debug environment variable is set to a true value (see
    :func:`arena.environment.flag_from_env`: anything but a yes/no value raises
    ``ConfigError``)."""
    return flag_from_env(variable)


def log_event(message: str, *, debug: bool, prefix: str = "[arena]") -> None:
    """Log a resize/lock/unlock event: at INFO when ``debug`` is on, else at DEBUG.

    With debug on and no logging configured, a stderr handler is attached so the lines
    show up, as the environment variable promises.
    """
    if debug:
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        logger.info("%s %s", prefix, message)
    else:
        logger.debug("%s %s", prefix, message)


def _internal() -> tuple[str, ...]:
    global _internal_dirs
    if _internal_dirs is None:
        dirs = [str(_PACKAGE_DIR) + os.sep]
        spec = importlib.util.find_spec("arena.adapters")
        if spec is not None and spec.origin:
            dirs.append(str(Path(spec.origin).resolve().parent) + os.sep)
        dirs.append(str(Path(logging.__file__).resolve().parent.parent / "contextlib.py"))
        _internal_dirs = tuple(dirs)
    return _internal_dirs


def caller_info(skip: int = 1) -> str:
    """``file:line:function`` of the first frame outside arena and its adapters.

    Memoised per code location: after the first time, naming a caller costs the walk
    over arena's own frames and one dictionary lookup. ``skip`` frames above the caller
    of this function are known to be arena's own and are not looked at.
    """
    try:
        # Only the frame skip levels up is made a frame object (the ones it passes are
        # not): each one made costs its making and a copy of its locals when it returns.
        frame = sys._getframe(skip)
    except ValueError:  # fewer frames than that (a call from C at the stack's bottom)
        return "<unknown>"
    while frame is not None:
        code = frame.f_code
        internal = _INTERNAL_FILES.get(code.co_filename)
        if internal is None:
            internal = _INTERNAL_FILES[code.co_filename] = _is_internal(code.co_filename)
        if not internal:
            # The instruction offset, not f_lineno: the line is computed from the line
            # table on every access, the offset is a plain field.
            location = (code, frame.f_lasti)
            site = _SITES.get(location)
            if site is None:
                if len(_SITES) >= _MAX_SITES:
                    _SITES.clear()  # code locations are few; this guards a pathological loop
                site = _SITES[location] = (
                    f"{os.path.basename(code.co_filename)}:{frame.f_lineno}:{code.co_name}"
                )
            return site
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def caller_memos() -> tuple[dict[tuple[object, int], str], dict[str, bool]]:
    """The memos :func:`caller_info` keeps: ``(code, f_lasti)`` -> site, and file name ->
    whether it is arena's own. The compiled hit path reads them (never writes) to name a
    known caller without running Python code."""
    return _SITES, _INTERNAL_FILES


def warn_user(message: str, category: type[Warning] | None = None) -> None:
    """Warn, attributed to the first frame outside arena and its adapters (the line of the
    user's code that led here), whatever the depth of arena's own frames."""
    if category is None:
        category = ArenaWarning
    level = 1
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        internal = _INTERNAL_FILES.get(code.co_filename)
        if internal is None:
            internal = _INTERNAL_FILES[code.co_filename] = _is_internal(code.co_filename)
        if not internal:
            break
        level += 1
        frame = frame.f_back  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level + 1)


#: (code object, instruction offset) -> "file:line:function".
_SITES: dict[tuple[object, int], str] = {}
_MAX_SITES = 1 << 16
#: File name -> whether its frames belong to arena: resolving a path costs about 16 us,
#: so each file is resolved once per process.
_INTERNAL_FILES: dict[str, bool] = {}


def _is_internal(path: str) -> bool:
    if path in _CONSUMER_FILES:
        return False
    internal = _internal()
    if path.startswith(internal):
        return True
    if path.startswith("<"):
        return False
    try:
        return str(Path(path).resolve()).startswith(internal)
    except OSError:
        return False


# The request log: what unlocked requests asked for, noted by the fronts directly. Per call
# site (caller_info's "file:line:function") the peak bytes requested; per slot the last
# request (for Arena.memory_snapshot); and, when the arena records a profile, every request
# goes to the profile's Recorder. Locked requests are never noted: the hot path pays nothing
# for it. The compiled hit (arena/views/_hit.c) writes ``peaks`` and ``last_requests`` by
# member offset, where the call site is known already (caller_memos); the profile recorder,
# in the observe layer above, is passed in. It lives with the call sites it is keyed by: a
# first request passes one module for both (tests/views/test_request_path.py).


class RequestRecorder(Protocol):
    """What the log tells of every noted request: a profile's
    :class:`~arena.observe.profile.Recorder` (the observe layer, above this one)."""

    def note(self, site: str, index: int, specs: Any, required: int) -> None:
        """A request of ``required`` bytes from ``site`` in slot ``index``."""


class RequestLog:
    """Call-site peaks and each slot's last request, fed by the fronts while unlocked.

    Parameters
    ----------
    recorder : RequestRecorder, optional
        The profile recorder to tell of every noted request.
    """

    __slots__ = ("__weakref__", "_mutex", "last_requests", "peaks", "recorder")

    def __init__(self, recorder: RequestRecorder | None = None) -> None:
        self._mutex = threading.Lock()
        after_fork(self, RequestLog._renew)
        #: Call site -> the largest request's bytes.
        self.peaks: dict[str, int] = {}
        #: Slot index -> (call site, specs) of its last request noted.
        self.last_requests: dict[int, tuple[str, Any]] = {}
        self.recorder = recorder

    def _renew(self) -> None:
        self._mutex = threading.Lock()

    def note(self, required: int, index: int, specs: Any) -> None:
        """A request of ``required`` bytes in slot ``index``, made by the caller's caller
        (the caller is the request path's own: ``ViewBuilder.miss`` or ``served``)."""
        # Arena's own for sure: caller_info, this method and the request path's method
        # that called it; the walk starts above them (a frame made an object only to be
        # passed cost a never-seen request about 0.3 us).
        site = caller_info(3)
        peaks = self.peaks
        if peaks.get(site, -1) < required:
            with self._mutex:
                if peaks.get(site, -1) < required:
                    peaks[site] = required
        self.last_requests[index] = (site, specs)
        recorder = self.recorder
        if recorder is not None:
            recorder.note(site, index, specs, required)

    def snapshot(self) -> tuple[dict[str, int], dict[int, tuple[str, Any]]]:
        """Copies of the call-site peaks and the last requests, taken together."""
        with self._mutex:
            return dict(self.peaks), dict(self.last_requests)
