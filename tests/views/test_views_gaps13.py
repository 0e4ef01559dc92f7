"""Mutation round 13c (issue 26 item 12): the views layer's sampled survivors.

``arena.views.hit`` picks the compiled hit or its Python twin once, at import, by what is
built: a test process sees one branch of its loader at most. These tests call the loader
again with ``load_extension`` stood in for, so each branch runs on any build and on both
hit paths: the extension is asked for by its name and bound to the lower layers' classes
and the caller memos in the order the C side reads them (``bind`` in ``_hit.c``), and
left out, with the reason, where it is not built.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from arena.base.events import RequestLog, caller_memos
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from arena.slots.stack import RegionStack
from arena.views import hit
from arena.views.prepared import Prepared


class _Extension:
    """A stand-in for ``arena.views._hit`` that records what ``bind`` is given."""

    def __init__(self) -> None:
        self.bound: list[tuple[Any, ...]] = []

    def bind(self, *classes: Any) -> None:
        self.bound.append(classes)


def _loader(answer: tuple[Any, str], asked: list[str]) -> Any:
    def load_extension(name: str) -> tuple[Any, str]:
        asked.append(name)
        return answer

    return load_extension


def test_the_hit_extension_is_loaded_by_name_and_bound_to_the_lower_layers_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    extension = _Extension()
    monkeypatch.setattr(hit, "load_extension", _loader((extension, ""), asked))
    module, why = hit._load()
    assert module is cast(Any, extension)
    assert why == ""
    assert asked == ["arena.views._hit"]
    sites, internal = caller_memos()
    assert len(extension.bound) == 1
    bound = extension.bound[0]
    assert bound[:6] == (Slot, RegionStack, Buffer, Prepared, Governor, RequestLog)
    # The memos themselves, not copies: the C side reads the ones caller_info fills.
    assert len(bound) == 8
    assert bound[6] is sites
    assert bound[7] is internal


def test_a_hit_extension_that_is_not_built_is_left_out_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    why = "the extension arena.views._hit is not built"
    monkeypatch.setattr(hit, "load_extension", _loader((None, why), asked))
    assert hit._load() == (None, why)
    assert asked == ["arena.views._hit"]
