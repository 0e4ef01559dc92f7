"""``ws.sync(group)`` with a group whose collectives answer what no rank of the protocol
sends, where the probes differ (another rank has other keys): an ``all_gather`` that
returns parts of another length, ``None`` or no part of this rank's, a schema round
whose ints no rank wrote. The docstring promises ``ArenaSyncError``; the exchange raised
``struct.error`` ("unpack requires a buffer of 24 bytes"), ``TypeError``, ``KeyError``
or ``OverflowError`` ("can't convert negative int to unsigned") from inside its decoding,
naming neither the group nor the fix."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from arena import Arena, ArenaSyncError


class _Differing:
    """One rank's view of a two-rank group whose other rank has one entry more: the
    probe says so; ``gather`` and ``schema`` say what the later collectives answer."""

    def __init__(self, gather: Any, schema: str = "echo") -> None:
        self.gather = gather
        self.schema = schema
        self.reduces = 0

    def all_reduce_max(self, values: list[int]) -> list[int]:
        self.reduces += 1
        if self.reduces == 1:  # the probe: the other rank has another count
            values = list(values)
            values[1] += 1
            return values
        if self.reduces == 2 and self.schema == "unwritten":
            return [-1] * len(values)  # no rank wrote the schemas' chunks
        if self.reduces == 2 and self.schema == "huge":
            return [1 << 62] * len(values)  # past 7 bytes per int
        if self.reduces == 2 and self.schema == "limit":
            return [1 << 56] * len(values)  # the first int past 7 bytes
        if self.reduces == 2 and self.schema == "latin":
            return [0x80 << 48] * len(values)  # 7 bytes, the first no ASCII
        if self.reduces == 2 and self.schema == "zeros":
            return [max(v, 0) for v in values]  # the other schema's chunks all NUL bytes
        return list(values)

    def all_gather(self, data: bytes) -> Any:
        if self.gather == "short":
            return [data, b"abc"]
        if self.gather == "none":
            return None
        if self.gather == "empty":
            return []
        if self.gather == "ints":
            return [data, 24]
        other = struct.pack(">qqq", 2, 12345, 10)  # another rank's schema, 10 bytes
        return [data, other]


@pytest.mark.parametrize(
    "gather, schema, says",
    [
        ("short", "echo", "all_gather"),
        ("none", "echo", "all_gather"),
        ("empty", "echo", "all_gather"),
        ("ints", "echo", "all_gather"),
        ("other", "unwritten", "all_reduce_max"),
        ("other", "huge", "all_reduce_max"),
        # Round 20: 2**56 itself (the bound, not 2**57), and 7 bytes that decode as no
        # ASCII: each named as the schema round's, not an OverflowError or None.
        ("other", "limit", "schema chunk no rank wrote"),
        ("other", "latin", "schema that is no rank's"),
    ],
)
def test_answers_no_rank_sends_are_named(gather: str, schema: str, says: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        before = ws.stats().slots[0].capacity
        with pytest.raises(ArenaSyncError, match=says):
            ws.sync(_Differing(gather, schema))
        assert ws.stats().slots[0].capacity == before  # nothing applied
        with ws.step("k") as step:  # and the arena goes on
            step.get_simultaneous(((64,), "float32"))


class _Below:
    """A group whose probe agrees but whose values round answers ``answer`` per int: no
    elementwise maximum (below this rank's own ints, or no int)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.reduces = 0

    def all_reduce_max(self, values: list[int]) -> list[Any]:
        self.reduces += 1
        return list(values) if self.reduces == 1 else [self.answer] * len(values)

    def all_gather(self, data: bytes) -> list[bytes]:
        return [data]


@pytest.mark.parametrize("answer", [-7, 1.5, "9"])
def test_a_values_round_below_this_ranks_own_is_named(answer: Any) -> None:
    """It went on: the cap became ``max_bytes=-1.5`` and plan_offsets refused a block of
    -7 bytes, the arena left half synced."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        ws.get_library_workspace("lib", 1024)
        with pytest.raises(ArenaSyncError, match=r"all_reduce_max.*elementwise maximum"):
            ws.sync(_Below(answer))
        assert ws.stats().slots[0].workspace_bytes == 1024
        with ws.step("k") as step:  # no cap or size came from the answer
            step.get_simultaneous(((64,), "float32"))
        ws.get_simultaneous(((1 << 12,), "float32"))


def test_a_schema_round_of_nul_bytes_is_named() -> None:
    """Round 20 found it: a schema chunk of NUL bytes (or other ASCII that is no JSON)
    passed _unchunk's range check and the ASCII decoding, and state.py's width() raised
    json.JSONDecodeError. The schema is now checked against the digest its rank
    announced, and nothing is applied."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        before = ws.stats().slots[0].capacity
        with pytest.raises(ArenaSyncError, match="do not hash to the digest"):
            ws.sync(_Differing("other", "zeros"))
        assert ws.stats().slots[0].capacity == before


class _Bools:
    """A group that answers every round's elementwise maximum, but each 0 or 1 as the
    bool ``False`` or ``True``: equal as numbers, and no int of the protocol."""

    def all_reduce_max(self, values: list[int]) -> list[Any]:
        return [bool(v) if v in (0, 1) else v for v in values]

    def all_gather(self, data: bytes) -> list[bytes]:
        return [data]


def test_a_bool_for_an_int_is_named_even_where_it_equals_this_ranks_own() -> None:
    """Round 20: the bool check itself (an int check alone takes ``False`` as 0, at least
    this rank's 0)."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        with pytest.raises(ArenaSyncError, match=r"at index \d+, (False|True) for this rank's"):
            ws.sync(_Bools())


class _Backend:
    """A group whose collectives answer in a backend's own types: NumPy ints for the
    maximum, and ``all_gather``'s parts as an iterator of bytearrays (read once). Its probe
    says another rank differs, though every part is this rank's own."""

    def __init__(self) -> None:
        self.reduces = 0

    def all_reduce_max(self, values: list[int]) -> list[Any]:
        import numpy as np

        self.reduces += 1
        answers = [np.int64(v) for v in values]
        if self.reduces == 1:
            answers[1] += 1  # the probe: another count
        return answers

    def all_gather(self, data: bytes) -> Any:
        return iter([bytearray(data), bytearray(data)])


def test_a_backends_own_types_are_read_as_ints_and_bytes() -> None:
    """Round 20: the checked answers are what the exchange goes on with (the ints as
    ``int``, the parts as the list read once), not the backend's objects again."""
    with Arena("cpu", framework="numpy") as ws:
        with ws.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        report = ws.sync(_Backend())
        assert report.schemas == 1
        assert report.after == (256,) and type(report.after[0]) is int
