"""The :class:`FrontTable`: an arena's fronts, one per framework and caching mode, each
made on first use with its framework's adapter."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .config import check_framework
from .devices import Device
from .errors import FrameworkUnavailableError
from .front import Front
from .governor import Governor
from .slot import Slot

__all__ = ["FrontTable", "load_adapter"]


class FrontTable:
    """The fronts of one arena, by ``(framework, cached)``.

    Parameters
    ----------
    owner : Arena
        The arena the fronts belong to (:attr:`Front.arena`).
    select : callable
        Returns the calling thread's slot.
    governor : Governor
        What the arena's slots share.
    max_cached : int
        Prepared view sets kept per slot buffer and front.
    """

    __slots__ = ("fronts", "governor", "max_cached", "owner", "select")

    def __init__(
        self, owner: Any, select: Callable[[], Slot], governor: Governor, max_cached: int
    ) -> None:
        self.owner = owner
        self.select = select
        self.governor = governor
        self.max_cached = max_cached
        self.fronts: dict[tuple[str, bool], Front] = {}

    def front(self, framework: str, cached: bool) -> Front:
        """The front for ``framework``, made on first use; see :meth:`arena.Arena.front`.

        Raises
        ------
        ConfigError
            If ``framework`` is not one an arena knows.
        FrameworkUnavailableError
            If the framework is not installed or cannot view this device's memory.
        """
        front = self.fronts.get((framework, cached))
        if front is None:
            check_framework(framework)
            adapter = load_adapter(framework, self.governor.device)
            front = Front(
                self.owner,
                self.select,
                self.governor,
                adapter,
                cached=cached,
                max_cached=self.max_cached,
            )
            self.fronts[(framework, cached)] = front
        return front


def load_adapter(framework: str, device: Device) -> ModuleType:
    """Import the adapter of ``framework`` and check that it can view ``device``'s memory.

    Raises
    ------
    FrameworkUnavailableError
        If the framework is not installed or cannot view this device's memory.
    """
    try:
        adapter = importlib.import_module(f"arena.adapters.{framework}")
    except FrameworkUnavailableError:
        raise  # the adapter's own message already says what to install
    except ImportError as exc:
        raise FrameworkUnavailableError(
            f"the {framework} front needs {framework}, which cannot be imported "
            f"({exc}); install it (pip install {framework}) or use another front"
        ) from exc
    adapter.check_device(device)
    return adapter
