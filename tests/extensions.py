"""Stand-ins for a compiled extension and for ``load_extension``, for the tests that call
a module's extension loader again (``arena.views.hit._load``,
``arena.planning.region_hit._load``) so each of its branches runs on any build; and the
skips of the tests of the compiled step rows and scope memo, which CPython 3.12 on has
not."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

__all__ = [
    "DICT_VERSION_TAGS",
    "NO_DICT_VERSION_TAGS",
    "RecordingExtension",
    "need_scope_memo",
    "need_step_rows",
    "recording_loader",
]

#: Whether CPython has dict version tags (``ma_version_tag``), which the compiled step rows
#: and the step and scope memos read to tell that a dict is unchanged: up to 3.11. CPython
#: 3.12 deprecates them, and ``arena/planning/_step_rows.h`` (``STEP_ROWS``) and
#: ``arena/planning/_region_hit.c`` (``STEP_MEMO``) compile all three out there: the
#: compiled hits read the dicts every time.
DICT_VERSION_TAGS = sys.version_info < (3, 12)
#: The skip reason of their tests on CPython 3.12 on (one string, listed in
#: tests/conftest.py ALLOWED_GPU_SKIPS).
NO_DICT_VERSION_TAGS = (
    "CPython 3.12 on has no dict version tags: the compiled step rows and the step and "
    "scope memos are compiled out"
)


def need_step_rows() -> Any:
    """``arena.planning._rows`` where the compiled step hit reads its rows; skip the
    calling test elsewhere: on CPython 3.12 on (:data:`NO_DICT_VERSION_TAGS`), and where
    the extension or the compiled step hit is not in use (not built, or
    ``ARENA_PURE_PYTHON=1``)."""
    from arena.planning import region_hit, rows

    if not DICT_VERSION_TAGS:
        pytest.skip(NO_DICT_VERSION_TAGS)
    if rows.compiled is None or region_hit.compiled is None or not rows.compiled.ROWS:
        pytest.skip("the compiled step rows are not in use here")
    return rows.compiled


def need_scope_memo() -> None:
    """Skip the calling test where the compiled scope hit has no memo of its views: on
    CPython 3.12 on (:data:`NO_DICT_VERSION_TAGS`), and where the compiled scope hit is
    not in use (not built, or ``ARENA_PURE_PYTHON=1``)."""
    from arena.planning import region_hit

    if not DICT_VERSION_TAGS:
        pytest.skip(NO_DICT_VERSION_TAGS)
    if region_hit.compiled is None:
        pytest.skip("the compiled scope hit's memo is not in use here")


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
