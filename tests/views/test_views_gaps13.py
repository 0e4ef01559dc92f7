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
from arena.base.layout import compute_layout
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from arena.slots.stack import RegionStack
from arena.views import hit
from arena.views.plan import _closure
from arena.views.prepared import Prepared, prepare
from tests.extensions import RecordingExtension, recording_loader


def test_the_hit_extension_is_loaded_by_name_and_bound_to_the_lower_layers_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    extension = RecordingExtension()
    monkeypatch.setattr(hit, "load_extension", recording_loader((extension, ""), asked))
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
    monkeypatch.setattr(hit, "load_extension", recording_loader((None, why), asked))
    assert hit._load() == (None, why)
    assert asked == ["arena.views._hit"]


def _fresh(view: Any) -> Any:
    return view


def test_a_prepared_entry_is_keyed_by_the_very_request_that_keys_it_in_its_cache() -> None:
    """``Prepared.key`` is the object its cache holds it under (the compiled hit looks
    the entry up again by that key's identity). Slip (``prepare`` #9): the key left None."""
    prepared: dict[str, dict[Any, Any]] = {}
    specs = (((2, 3), "float32"),)
    prepare(prepared, "front", specs, 24, ["view"], fresh=_fresh, limit=4)
    entry = prepared["front"][specs]
    assert type(entry) is Prepared
    assert entry.key is specs


def test_a_request_remembered_in_a_full_cache_is_found_by_its_specs() -> None:
    """A full cache sweeps its oldest entries and keeps the new one under its request.
    Slip (``prepare`` #35): remembered under None, the request missed every time."""
    prepared: dict[str, dict[Any, Any]] = {}
    first = (((2,), "float32"),)
    second = (((3,), "float32"),)
    prepare(prepared, "front", first, 8, ["a"], fresh=_fresh, limit=1)
    prepare(prepared, "front", second, 12, ["b"], fresh=_fresh, limit=1)
    cache = prepared["front"]
    assert list(cache) == [second]
    assert cache[second].views == ["b"]


class _Adapter:
    """A stand-in adapter: each dtype's native form is the resolved dtype itself."""

    def native_dtype(self, resolved: Any) -> Any:
        return resolved

    def plan_view(self, *args: Any) -> Any:  # never called: the request only places
        raise AssertionError(args)

    def plan_in_bytes(self, *args: Any) -> Any:
        raise AssertionError(args)


def test_a_plans_placement_past_the_capacity_is_compute_layouts() -> None:
    """A request past the slot's capacity gets the placement to grow to, written out in
    the plan's builder: the same as ``compute_layout``'s, each view's bytes included.
    Slip (``_closure`` #101): the views' ``nbytes`` left None."""
    structure = ((2, "float32"), (1, "int64"))
    build, _ = _closure(structure, _Adapter(), 256)
    specs = (((3, 5), "float32"), ((7,), "int64"))
    placed = build(specs, 0, None)
    assert placed == compute_layout(specs, 256)
    assert [view.nbytes for view in placed.views] == [60, 56]
