"""review34: a request's dtypes resolved in one call (``resolve_natives``, the compiled
Planner's) explain a bad request as the Python path does: the first spec's dtype that
does not resolve is the one named, even where a later spec's dtype raises on resolution
(the compiled Planner used to resolve the later one too, and raised its error)."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.base.dtypes import resolve_natives
from arena.errors import DTypeError


class _Raising(type):
    @property
    def dtype(cls) -> Any:
        raise RuntimeError("resolving this dtype raised")


class Exploding(metaclass=_Raising):
    """A type whose resolution raises (its ``dtype`` attribute)."""


@pytest.mark.parametrize("first", ["nope", "float"])
def test_a_requests_first_bad_dtype_is_named_though_a_later_one_raises(
    hit_path: str, first: str
) -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((1,), "float32"))  # warm: the compiled Planner serves next
        with pytest.raises(DTypeError, match=repr(first)):
            ws.get_simultaneous(((2,), first), ((2,), Exploding))


def test_resolve_natives_stops_at_the_first_dtype_that_does_not_resolve() -> None:
    calls: list[Any] = []

    def native(dtype: Any) -> Any:
        calls.append(dtype)
        return dtype.name

    answers = resolve_natives(["float32", "nope", Exploding, "int8"], native)
    assert answers[0] == (4, "float32")
    assert answers[1:] == (None, None, None)
    assert len(calls) == 1
