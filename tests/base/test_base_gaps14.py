"""Gaps in the tests of poisoning and dtype resolution (``arena/base/poison.py``,
``arena/base/dtypes.py``), found by Round 14c of mutation testing (``scripts/mutation
parts``, docs/testing.md): each test names the mutants it kills."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena.base import dtypes
from arena.base.poison import NAN_BYTE, PATTERN_BYTE, sentinel_byte
from arena.errors import DTypeError


def test_the_first_sentinel_byte_of_a_dtype_object_is_its_sentinel() -> None:
    """``sentinel_byte`` #1 (the memo's first answer ``None``): a dtype object never
    asked about before, a class of its own each run, so the memo cannot hold it (the
    other tests ask about dtypes a test before them already put in the memo)."""
    floating = type("Float16Like", (), {"dtype": np.dtype("float16")})
    integer = type("Int32Like", (), {"dtype": np.dtype("int32")})
    assert sentinel_byte(floating) == NAN_BYTE
    assert sentinel_byte(floating) == NAN_BYTE
    assert sentinel_byte(integer) == PATTERN_BYTE
    assert sentinel_byte(integer) == PATTERN_BYTE


def test_a_native_dtype_that_fails_answers_none_for_it_and_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``resolve_natives`` #8 (``return`` for ``break`` in the native loop: ``None``, not a
    tuple, and no seed kept, where a framework's native dtype fails for one of them)."""
    monkeypatch.setattr(dtypes, "_SEEDS", ())

    def native(dtype: Any) -> Any:
        if dtype.name == "int8":
            raise TypeError("int8 has no native dtype here")
        return dtype.name

    answers = dtypes.resolve_natives([np.float32, np.int8, np.int16], native)
    assert answers == ((4, "float32"), None, None)
    assert dtypes.seeds() == (np.float32,)


def test_only_numpys_canonical_dtype_objects_are_kept_as_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``resolve_natives`` #26 (``is not``: a NumPy dtype object made per call kept as a
    seed, NumPy's canonical one for the same type not)."""
    monkeypatch.setattr(dtypes, "_SEEDS", ())
    made = np.dtype(np.float32, metadata={"made": "per call"})
    canonical = np.dtype("float16")
    answers = dtypes.resolve_natives([made, canonical], lambda d: d.name)
    assert answers == ((4, "float32"), (2, "float16"))
    kept = dtypes.seeds()
    assert len(kept) == 1
    assert kept[0] is canonical


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (np.dtype("float32"), "float32"),
        (np.dtype("int8"), "int8"),
        (np.dtype(np.float32, metadata={"made": "per call"}), "float32"),
    ],
)
def test_a_numpy_dtype_object_resolves_as_numpy_reads_it(dtype: Any, name: str) -> None:
    """A NumPy dtype object resolves to its name, whichever path takes it (the check of
    ``_resolve_uncached`` #29, #31: ``sys.modules.get`` of another name, so that no NumPy
    dtype is taken by the first test, reaches the same answer by ``_from_numpy_like``)."""
    assert dtypes._resolve_uncached(dtype).name == name


@pytest.mark.parametrize(
    ("dtype", "match"),
    [
        (np.dtype(">f4"), "non-native byte order '>'"),
        (np.dtype([("a", "f4")]), "structured or sub-array dtype"),
    ],
)
def test_a_numpy_dtype_object_refused_names_why_whichever_path_takes_it(
    dtype: Any, match: str
) -> None:
    """The refusals of NumPy dtype objects, on the path ``_resolve_uncached`` #29, #31 take
    them by too (``_from_numpy_like``): the same errors."""
    with pytest.raises(DTypeError, match=match):
        dtypes._resolve_uncached(dtype)
