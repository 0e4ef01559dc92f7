"""Stand-ins for a compiled extension and for ``load_extension``, for the tests that call
a module's extension loader again (``arena.views.hit._load``,
``arena.planning.region_hit._load``) so each of its branches runs on any build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RecordingExtension", "recording_loader"]


class RecordingExtension:
    """A stand-in extension that records what ``bind`` is given, call by call."""

    def __init__(self) -> None:
        self.bound: list[tuple[Any, ...]] = []

    def bind(self, *classes: Any) -> None:
        self.bound.append(classes)


def recording_loader(answer: tuple[Any, str], asked: list[str]) -> Callable[[str], tuple[Any, str]]:
    """A ``load_extension`` that appends each name it is asked for to ``asked`` and
    returns ``answer`` (the module or None, and the reason it is not built)."""

    def load_extension(name: str) -> tuple[Any, str]:
        asked.append(name)
        return answer

    return load_extension
