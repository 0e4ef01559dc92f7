"""The extension loader's answers (``arena/base/extensions.py``), found by Round 12a of
mutation testing (``scripts/mutation parts``, docs/testing.md): the loader runs when
arena is imported, before a mutation run picks a mutant, so these tests call it again."""

from __future__ import annotations

import json
import sys

import pytest

from arena.base.extensions import load_extension, numpy_array_api


def test_a_loaded_module_comes_without_a_reason_and_a_missing_one_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``load_extension`` #7, #8 (the module not imported), #9 (a reason given for a
    module in use: ``WHY_PYTHON`` then read "XXXX" beside a compiled path)."""
    monkeypatch.delenv("ARENA_PURE_PYTHON", raising=False)
    assert load_extension("json") == (json, "")
    assert load_extension("arena.no_such_extension") == (
        None,
        "the extension arena.no_such_extension is not built",
    )


@pytest.mark.parametrize("value", ["1", "yes", "TRUE"])
def test_arena_pure_python_loads_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """``load_extension`` #1 to #3 (another variable read, or none), #4 to #6 (the reason
    reworded: ``python -m arena --version`` prints it)."""
    monkeypatch.setenv("ARENA_PURE_PYTHON", value)
    assert load_extension("json") == (None, "ARENA_PURE_PYTHON is set")
    monkeypatch.setenv("ARENA_PURE_PYTHON", "0")
    assert load_extension("json") == (json, "")


def test_numpys_c_api_table_is_found_where_numpy_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``numpy_array_api`` #1 to #8, #10, #11 (the table not found: the compiled paths
    then ran Python), #9 (``getattr`` without its default: an AttributeError where NumPy
    keeps the table in neither module)."""
    import numpy  # noqa: F401  (imports its C core)

    names = ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath")
    core = next(sys.modules[n] for n in names if sys.modules.get(n) is not None)
    assert numpy_array_api() is core._ARRAY_API is not None
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert numpy_array_api() is None
