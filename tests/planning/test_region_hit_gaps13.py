"""Mutation round 13b (issue 26 item 12): how ``arena.planning.region_hit`` chooses the
compiled region hits or their Python twins.

Its loader runs once, at import, and picks by what is built: a test process sees one
branch of it at most. These tests call it again with the layers it asks stood in for
(the views layer's compiled hit, ``load_extension``), so each branch runs on any build and
on both hit paths: the extension is asked for by its name, bound to the slots' and views'
classes in the order the C side reads them, and left out, with the reason, where the
views layer's compiled hit (whose C-API it uses) is not in use.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from arena.planning import region_hit
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from arena.slots.stack import RegionStack
from arena.views import hit
from arena.views.prepared import Prepared
from tests.extensions import RecordingExtension, recording_loader


def test_without_the_views_layers_compiled_hit_nothing_is_loaded_and_its_reason_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(hit, "compiled", None)
    monkeypatch.setattr(hit, "WHY_PYTHON", "the extension arena.views._hit is not built")
    monkeypatch.setattr(
        region_hit, "load_extension", recording_loader((RecordingExtension(), ""), asked)
    )
    assert region_hit._load() == (None, "the extension arena.views._hit is not built")
    assert asked == []


def test_the_region_hit_extension_is_loaded_by_name_and_bound_to_the_lower_layers_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    extension = RecordingExtension()
    monkeypatch.setattr(hit, "compiled", SimpleNamespace())
    monkeypatch.setattr(region_hit, "load_extension", recording_loader((extension, ""), asked))
    assert region_hit._load() == (extension, "")
    assert asked == ["arena.planning._region_hit"]
    assert extension.bound == [(Slot, RegionStack, Buffer, Prepared, Governor)]


def test_a_region_hit_extension_that_is_not_built_is_left_out_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    why = "the extension arena.planning._region_hit is not built"
    monkeypatch.setattr(hit, "compiled", SimpleNamespace())
    monkeypatch.setattr(region_hit, "load_extension", recording_loader((None, why), asked))
    assert region_hit._load() == (None, why)
    assert asked == ["arena.planning._region_hit"]


def test_the_bases_are_the_extensions_where_it_is_loaded_and_the_twins_elsewhere() -> None:
    if region_hit.compiled is None:
        assert region_hit.StepHitBase is region_hit.PyStepHitBase
        assert region_hit.ScopeHitBase is region_hit.PyScopeHitBase
        assert region_hit.WHY_PYTHON
    else:
        assert region_hit.StepHitBase is region_hit.compiled.StepHitBase
        assert region_hit.ScopeHitBase is region_hit.compiled.ScopeHitBase
        assert region_hit.WHY_PYTHON == ""
