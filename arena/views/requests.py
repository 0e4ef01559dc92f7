"""The request log: what unlocked requests asked for, noted by the fronts directly.

Per call site (``file:line:function`` of the first frame outside arena) the peak bytes
requested; per slot the last request (for :meth:`arena.Arena.memory_snapshot`); and, when
the arena records a profile, every request goes to the :class:`~arena.observe.profile.Recorder`.
Locked requests are never noted: the hot path pays nothing for it.

It lives with the request path (the compiled hit, ``_hit.c``, writes ``peaks`` and
``last_requests`` by member offset); the profile recorder above it is passed in.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from arena.base.events import caller_info
from arena.forks import after_fork

__all__ = ["RequestLog", "RequestRecorder"]


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
