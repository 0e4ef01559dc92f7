"""One way to make a view per adapter (issue 27 item 2).

Whatever picked the offsets, an adapter makes every view with its one ``plan_view``: its
``typed_views`` (every route that hands over a placement record, a
:class:`~arena.base.layout.Layout`: the plain layout, the scope stack, a step's plan, a
plan's placement that grows the slot) is a loop over it, and a structure's plan serving
a request in the current buffer calls it directly, with the record's own fields: the same
dtype, shape, strides and offset, in the adapter's units, as ``typed_views`` passes for
the request's ``compute_layout``. The plan does not build the record itself (a record per
request costs 1.4-1.7 times the plan's whole request: docs/architecture.md, "The
placement record"); this test holds the two routes to the same calls.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from arena.base.layout import compute_layout
from arena.views.plan import make_plan

STRUCTURE = ((2, "float16"), (1, "int32"), (3, "bfloat16"), (1, "uint8"))


def _specs(n: int) -> tuple[Any, ...]:
    return (
        ((n, 17), "float16"),
        ((33 * n,), "int32"),
        ((3, n, 5), "bfloat16"),
        ((n + 1,), "uint8"),
    )


def _wrapper(framework: str, module: Any, nbytes: int) -> Any:
    if framework == "torch":
        import torch

        return module._Buffer(torch.zeros(nbytes, dtype=torch.uint8))
    return np.zeros(nbytes, np.uint8)


def _address(framework: str, view: Any) -> int:
    if framework == "torch":
        return int(view.data_ptr())
    return int(view.__array_interface__["data"][0])


@pytest.mark.parametrize("tier", ["closure", "generated"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_plan_and_typed_views_make_each_view_with_plan_view_from_the_records_fields(
    framework: str, tier: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(framework)
    if framework == "numpy":
        pytest.importorskip("ml_dtypes")  # bfloat16
    module = importlib.import_module(f"arena.adapters.{framework}")
    adapter = module.ADAPTER
    real = module._plan_view
    # The adapter's plan_view is the function its typed_views calls: one way.
    assert type(adapter).plan_view is real
    calls: list[tuple[Any, ...]] = []

    def spy(source: Any, native: Any, shape: Any, strides: Any, offset: int) -> Any:
        calls.append((native, tuple(shape), tuple(strides), offset))
        return real(source, native, shape, strides, offset)

    monkeypatch.setattr(module, "_plan_view", spy)  # typed_views' route
    monkeypatch.setattr(type(adapter), "plan_view", staticmethod(spy))  # read by make_plan
    plan = make_plan(STRUCTURE, adapter, 256)
    assert plan is not None
    if tier == "generated":
        plan.generate()
    for n in (1, 2, 7, 100):
        specs = _specs(n)
        layout = compute_layout(specs, 256)
        wrapper = _wrapper(framework, module, layout.total)
        calls.clear()
        from_record = adapter.typed_views(wrapper, layout)
        record_calls = list(calls)
        assert len(record_calls) == len(layout.views)  # every view through plan_view
        calls.clear()
        source = adapter.plan_source
        sources = tuple(
            wrapper if source is None else source(wrapper, native) for native in plan.natives
        )
        total, from_plan = plan.build(specs, layout.total, sources)
        assert total == layout.total
        assert calls == record_calls
        for a, b in zip(from_plan, from_record, strict=True):
            assert _address(framework, a) == _address(framework, b)
            assert (tuple(a.shape), a.dtype) == (tuple(b.shape), b.dtype)
            assert tuple(a.stride() if framework == "torch" else a.strides) == tuple(
                b.stride() if framework == "torch" else b.strides
            )
