"""The exchange behind :meth:`arena.Arena.sync`: every rank leaves with the union of the
ranks' keys and, per key, the maximum of their values, in at most four collectives whose
lengths every rank knows before it calls them, so a mismatch cannot hang.

A rank's state is a *schema* (a sorted list of entries, each a canonical JSON text naming
one thing: a slot, a step key with its request structure, a workspace key...) and, per
entry, a fixed number of signed 64-bit ints that follows from the entry alone.

1. **Probe** (``all_reduce_max``, 7 ints): a tag, the entry count, a 62-bit BLAKE2b digest
   of the schema and its byte length, each also negated: a rank sees whether every rank
   has the same schema (the maximum of ``x`` and of ``-x`` agree) without a second round.
2. **Only where the probes differ**, ``all_gather`` of each rank's 24-byte probe (count,
   digest, length), then one ``all_reduce_max`` over the distinct schemas laid end to end
   (7 bytes per int; a rank writes its own schema where its digest goes and -1 elsewhere):
   every rank decodes every distinct schema and takes the union. Bytes per rank: the sum
   of the distinct schemas, not ranks x schema, and nothing pickled.
3. **Values** (``all_reduce_max``): the union's ints end to end; an entry a rank lacks is
   -2**63 there (the maximum skips it). Where schemas differed, one more int per entry
   is 1 on a rank that lacks it: the report names keys only some ranks had.

No rank's hash seed plays a part: entries are sorted texts, digests are BLAKE2b.
"""

from __future__ import annotations

import hashlib
import json
import operator
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from arena.errors import ArenaError, ArenaSyncError

__all__ = ["Exchange", "encode_entry", "exchange"]

#: Opens the probe: a rank that runs another collective of the same length is caught.
TAG = 0x61726E6173796E63  # "arnasync"
_ABSENT = -(2**63)
_CHUNK = 7  # schema bytes per int: a non-negative int64 holds 7 bytes


def encode_entry(entry: Sequence[Any]) -> str:
    """One entry's canonical text (compact JSON: the same on every rank)."""
    return json.dumps(list(entry), separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class Exchange:
    """What :func:`exchange` brought back.

    Attributes
    ----------
    entries : tuple of str
        The union of the ranks' entries, sorted.
    values : dict
        Entry -> the maximum over the ranks that have it of each of its ints.
    partial : frozenset of str
        Entries some rank lacked (empty when every probe agreed).
    schemas : int
        Distinct schemas among the ranks (1 when every probe agreed).
    payload_bytes : int
        Bytes this rank handed to the collectives (the backend's framing and its
        algorithm's extra traffic not counted).
    collectives : int
        Collectives this rank ran.
    seconds : float
        Wall time of the exchange.
    """

    entries: tuple[str, ...]
    values: dict[str, list[int]]
    partial: frozenset[str]
    schemas: int
    payload_bytes: int
    collectives: int
    seconds: float


class _Counted:
    """The group's two collectives, counting what this rank hands them and checking
    what comes back."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.payload = 0
        self.calls = 0

    def reduce(self, values: list[int]) -> list[int]:
        self.payload += 8 * len(values)
        self.calls += 1
        got = list(self._call("all_reduce_max", values))
        if len(got) != len(values):
            raise ArenaSyncError(
                f"the group's all_reduce_max returned {len(got)} ints for {len(values)}: "
                "it must return the elementwise maximum, as long as its input"
            )
        answers: list[int] = []
        for index, (answer, own) in enumerate(zip(got, values, strict=True)):
            try:  # a backend's integer types are ints too; no float, str or bool
                number = None if answer.__class__ is bool else operator.index(answer)
            except TypeError:
                number = None
            if number is None or number < own:
                raise ArenaSyncError(
                    f"the group's all_reduce_max returned no elementwise maximum: at index "
                    f"{index}, {answer!r} for this rank's {own} (each answer is an int, at "
                    "least every rank's own). Every rank must call ws.sync(group) (or "
                    "ws.lock(group=...)) at the same point"
                )
            answers.append(number)
        return answers

    def gather(self, data: bytes) -> list[bytes]:
        self.payload += len(data)
        self.calls += 1
        got = self._call("all_gather", data)
        try:  # bytes-like parts only: bytes(24) would make 24 zero bytes of an int
            parts = [bytes(memoryview(part)) for part in got]
        except TypeError:
            parts = []
        if data not in parts or [part for part in parts if len(part) != len(data)]:
            raise ArenaSyncError(
                f"the group's all_gather returned {got!r:.200} for {len(data)} bytes: it "
                f"must return every rank's bytes (this rank's among them), each "
                f"{len(data)} bytes long"
            )
        return parts

    def _call(self, name: str, argument: Any) -> Any:
        try:
            return getattr(self.group, name)(argument)
        except ArenaError:
            raise
        except Exception as exc:  # a user's group: name it and what it raised
            raise ArenaSyncError(
                f"arena sync: {name} of the group {self.group!r} raised "
                f"{type(exc).__name__}: {exc}. Every rank must call ws.sync(group) (or "
                "ws.lock(group=...)) at the same point"
            ) from exc


def _digest(schema: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(schema, digest_size=8).digest(), "big") >> 2


def _chunks(data: bytes) -> list[int]:
    return [
        int.from_bytes(data[i : i + _CHUNK].ljust(_CHUNK, b"\0"), "big")
        for i in range(0, len(data), _CHUNK)
    ]


def _unchunk(ints: list[int], length: int) -> bytes:
    """The ``length`` bytes of a schema from its chunks.

    Raises
    ------
    ArenaSyncError
        A chunk no rank wrote (-1: no rank had this schema) or past 7 bytes.
    """
    if [v for v in ints if not 0 <= v < 1 << (8 * _CHUNK)]:  # a list, not any()
        raise ArenaSyncError(
            "the group's all_reduce_max returned a schema chunk no rank wrote (each is in "
            f"[0, 2**{8 * _CHUNK}), written by the ranks whose probe all_gather named): "
            "every rank must call ws.sync(group) (or ws.lock(group=...)) at the same point"
        )
    body = b"".join(v.to_bytes(_CHUNK, "big") for v in ints)
    return body[:length]


def exchange(group: Any, local: dict[str, list[int]], width: Callable[[str], int]) -> Exchange:
    """Run the exchange (see the module's text) over ``group``.

    Parameters
    ----------
    group : SyncGroup
        ``all_reduce_max`` and ``all_gather``.
    local : dict
        This rank's entries (:func:`encode_entry` texts) and their ints.
    width : callable
        The number of ints of an entry, from its text alone (the same on every rank).

    Raises
    ------
    ArenaSyncError
        A collective failed or returned what no rank of this protocol sends.
    """
    start = time.perf_counter()
    wire = _Counted(group)
    entries = sorted(local)
    schema = "\n".join(entries).encode()
    digest, count, length = _digest(schema), len(entries), len(schema)
    probe = wire.reduce([TAG, count, -count, digest, -digest, length, -length])
    if probe[0] != TAG:
        raise ArenaSyncError(
            "another collective answered arena's sync probe: every rank must call "
            "ws.sync(group) (or ws.lock(group=...)) at the same point"
        )
    same = probe[1] == -probe[2] and probe[3] == -probe[4] and probe[5] == -probe[6]
    union: list[str] = entries
    schemas = 1
    if not same:
        heads = [
            struct.unpack(">qqq", raw)
            for raw in wire.gather(struct.pack(">qqq", count, digest, length))
        ]
        distinct: dict[int, int] = {}  # digest -> schema length, in rank order
        for _, found, size in heads:
            distinct.setdefault(found, size)
        schemas = len(distinct)
        row: list[int] = []
        spans = []
        for found, size in distinct.items():
            n = -(-size // _CHUNK)
            spans.append((len(row), n, size))
            row += _chunks(schema) if found == digest else [-1] * n
        got = wire.reduce(row)
        merged: set[str] = set()
        for (found, _), (offset, n, size) in zip(distinct.items(), spans, strict=True):
            raw = _unchunk(got[offset : offset + n], size)
            # The schema the heads announced, byte for byte (its digest): anything else,
            # NUL bytes or text that is no JSON entry, is no rank's, and is named here,
            # before width() or a decoder meets it.
            if _digest(raw) != found:
                raise ArenaSyncError(
                    "the group's all_reduce_max returned a schema that is no rank's (its "
                    f"{size} bytes do not hash to the digest its rank's all_gather "
                    "announced): every rank must call ws.sync(group) (or "
                    "ws.lock(group=...)) at the same point"
                )
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError as exc:  # entries are ASCII JSON (encode_entry)
                raise ArenaSyncError(
                    f"the group's all_reduce_max returned a schema that is no rank's ({exc})"
                ) from exc
            merged.update(line for line in text.split("\n") if line)
        union = sorted(merged)
    mine = set(entries)
    row = []
    for entry in union:
        n = width(entry)
        row += local[entry] if entry in mine else [_ABSENT] * n
    if not same:
        row += [0 if entry in mine else 1 for entry in union]
    got = wire.reduce(row)
    values: dict[str, list[int]] = {}
    position = 0
    for entry in union:
        n = width(entry)
        values[entry] = got[position : position + n]
        position += n
    partial = frozenset(e for e, flag in zip(union, got[position:], strict=False) if flag)
    return Exchange(
        tuple(union),
        values,
        partial,
        schemas,
        wire.payload,
        wire.calls,
        time.perf_counter() - start,
    )
