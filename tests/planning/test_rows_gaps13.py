"""Mutation round 13b (issue 26 item 12): ``arena.planning.rows``, the step rows' loader
and the two functions a replay calls, on any build.

The compiled rows (``arena/planning/_rows.c``) are tested in test_step_rows.py where they
are built; there the Python module's compiled branches run, elsewhere only its plain-list
branches. Here the extension and the compiled step hit are stood in for, so both branches
run on both hit paths: the extension is loaded by its name only where the compiled step
hit is in use, and its list type bound to that hit; a cache list is the extension's list
type made of the empty dicts; a row is noted, by request index, for that type only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from arena.planning import region_hit, rows


class _Caches(list):  # type: ignore[type-arg]
    """A stand-in for ``StepCaches``: a list subclass (``note_row`` tells it from a list)."""


class _Rows:
    """A stand-in for ``arena.planning._rows`` that records what it is given."""

    StepCaches = _Caches

    def __init__(self, noted: object = 1) -> None:
        self.notes: list[tuple[Any, int]] = []
        self.noted = noted

    def note(self, caches: Any, r: int) -> object:
        self.notes.append((caches, r))
        return self.noted


def test_the_rows_extension_is_loaded_by_name_and_its_list_type_bound_to_the_step_hit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound: list[Any] = []
    asked: list[str] = []
    extension = _Rows()

    def load_extension(name: str) -> tuple[Any, str]:
        asked.append(name)
        return extension, ""

    monkeypatch.setattr(region_hit, "compiled", SimpleNamespace(bind_rows=bound.append))
    monkeypatch.setattr(rows, "load_extension", load_extension)
    assert rows._load() == (extension, "")
    assert asked == ["arena.planning._rows"]
    assert bound == [_Caches]


def test_a_rows_extension_that_is_not_built_binds_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound: list[Any] = []
    why = "the extension arena.planning._rows is not built"
    monkeypatch.setattr(region_hit, "compiled", SimpleNamespace(bind_rows=bound.append))
    monkeypatch.setattr(rows, "load_extension", lambda name: (None, why))
    assert rows._load() == (None, why)
    assert bound == []


def test_without_the_compiled_step_hit_the_rows_extension_is_not_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def load_extension(name: str) -> tuple[Any, str]:
        asked.append(name)
        return _Rows(), ""

    monkeypatch.setattr(region_hit, "compiled", None)
    monkeypatch.setattr(region_hit, "WHY_PYTHON", "ARENA_PURE_PYTHON is set")
    monkeypatch.setattr(rows, "load_extension", load_extension)
    assert rows._load() == (None, "ARENA_PURE_PYTHON is set")
    assert asked == []


def test_a_cache_list_is_the_extensions_list_of_one_empty_dict_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows, "compiled", _Rows())
    caches = rows.new_caches(3)
    assert type(caches) is _Caches
    assert caches == [{}, {}, {}]
    assert len({id(entry) for entry in caches}) == 3  # a dict of its own per request


def test_a_row_is_noted_for_the_extensions_lists_by_request_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extension = _Rows(noted=1)
    monkeypatch.setattr(rows, "compiled", extension)
    caches = _Caches([{}, {}])
    assert rows.note_row(caches, 1) is True  # the extension's answer, as a bool
    assert extension.notes == [(caches, 1)]
    extension.noted = 0
    assert rows.note_row(caches, 0) is False
    assert extension.notes == [(caches, 1), (caches, 0)]


def test_a_plain_list_has_no_rows_even_where_the_extension_is_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extension = _Rows(noted=1)
    monkeypatch.setattr(rows, "compiled", extension)
    assert rows.note_row([{}, {}], 0) is False
    assert extension.notes == []


def test_without_the_extension_nothing_is_noted_on_any_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows, "compiled", None)
    assert rows.note_row(_Caches([{}]), 0) is False
    assert rows.note_row([{}], 0) is False
