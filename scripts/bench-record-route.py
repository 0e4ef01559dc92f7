"""What a placement record would cost a plan-served request (issue 27 item 2).

A structure's plan serves a request of new sizes that the slot's buffer holds by computing
the offsets and building the views in one pass (``arena/views/plan.py``). Item 2 asks for
one record (per view its offset, shape, strides and dtype, plus the total) to pass from
whatever picks offsets to one function that serves views. This script swaps a plan's
builder for a prototype that makes such a record and hands it to one serving function, and
measures a plan-served request through ``ws.numpy.get_simultaneous`` (the compiled hit
path where it is built): a 2-view request of a known structure and new sizes, in a
presized buffer, never seen before (so the plan serves every one, and none is
remembered). docs/architecture.md ("The placement record") gives the figures.

Modes (the prototypes are not in the package):

* ``base``: the plan as it is (offsets and views in one pass).
* ``rbase``: the plan's closure written again here, the views in one pass (the closure
  prototypes' baseline: the same code but for the record).
* ``tmin``: a tuple per view in the adapter's units, ``(offset, shape, byte strides,
  native dtype)``, handed to one serving function: the least any record route costs.
* ``tfull``: a tuple per view as :class:`~arena.base.layout.Layout` means it, ``(offset,
  shape, strides in elements, DType)``, served by one function that converts them as
  ``typed_views`` does.
* ``layout``: the plan makes the ``Layout`` and ``ViewLayout`` records and hands them to
  the adapter's ``typed_views`` (closure only).

Usage::

    python scripts/bench-record-route.py count MODE GENERATED N
        # N plan-served requests, for an instruction count: run it under
        # valgrind --tool=callgrind with N=1000 and N=5000 (PYTHONHASHSEED=0) and divide
        # the difference by 4000
    python scripts/bench-record-route.py paired MODE GENERATED ROUNDS
        # MODE against base (or rbase), paired rounds of 1000 requests each
        # (arena.tools.timing.ratios: median of the per-round ratios, p10-p90)
"""

from __future__ import annotations

import gc
import re
import sys
import time
from typing import Any

from arena.adapters.numpy import _NATIVE, ADAPTER

import arena
from arena.base.dtypes import resolve_dtype
from arena.base.layout import Layout, ViewLayout, exact_dims
from arena.tools.timing import ratios
from arena.views import plan as plans
from arena.views.builder import structure_of

# Seen before the bench (its int32 view is shorter than any bench request's).
STRUCTURE = (((4, 2), "float32"), ((2,), "int32"))
SEQUENCES = (tuple, list)


def sizes(k: int) -> tuple[Any, ...]:
    """The ``k``-th request: the structure of :data:`STRUCTURE`, sizes of its own."""
    return (((4 + k % 50, 2 + k // 200), "float32"), ((3 + k,), "int32"))


def serve_min(placed: Any, sources: Any, view: Any) -> list[Any]:
    """The one serving function, for a record in the adapter's units."""
    views = []
    for (offset, shape, strides, native), source in zip(placed, sources, strict=True):
        views.append(view(source, native, shape, strides, offset))
    return views


def serve_full(placed: Any, sources: Any, view: Any) -> list[Any]:
    """The one serving function, for a record as ``Layout`` means it."""
    views = []
    for (offset, shape, strides, dtype), source in zip(placed, sources, strict=True):
        native = _NATIVE.get(dtype.name)
        if native is None:
            native = ADAPTER.native_dtype(dtype)
        in_bytes = tuple(map(dtype.itemsize.__mul__, strides))
        views.append(view(source, native, shape, in_bytes, offset))
    return views


def closure(mode: str, structure: Any, alignment: int) -> Any:  # noqa: PLR0915 (a replica)
    """A plan's closure (``arena.views.plan._closure``, NumPy's units), its view loop as
    ``mode`` says."""
    view = ADAPTER.plan_view
    dtypes = [resolve_dtype(dtype) for _, dtype in structure]
    natives = [ADAPTER.native_dtype(dtype) for dtype in dtypes]
    per_view = tuple(
        (ndim, dtype, resolved.itemsize, native)
        for (ndim, dtype), resolved, native in zip(structure, dtypes, natives, strict=True)
    )
    count = len(per_view)
    mask = alignment - 1

    def build(specs: Any, capacity: int, sources: Any) -> Any:  # noqa: PLR0915
        if len(specs) != count:
            return None
        shapes = []
        for spec, (ndim, want, _, _) in zip(specs, per_view, strict=True):
            if spec.__class__ not in SEQUENCES or len(spec) != 2:
                return None
            shape, dtype = spec
            if dtype is not want or shape.__class__ not in SEQUENCES or len(shape) != ndim:
                return None
            shapes.append(shape)
        offsets = []
        counts = []
        total = 0
        for shape, (_, _, itemsize, _) in zip(shapes, per_view, strict=True):
            if not exact_dims(shape):
                return False
            numel = 1
            for dim in shape:
                if dim < 0:
                    return False
                numel *= dim
            if not numel:
                return False
            offsets.append(total)
            counts.append(numel * itemsize)
            total += (numel * itemsize + mask) & ~mask
        if total > capacity:
            raise AssertionError("the bench's requests fit the presized buffer")
        if sources is None:
            return True
        if mode == "rbase":  # the views in one pass
            views = []
            for shape, offset, (_, _, itemsize, native), source in zip(
                shapes, offsets, per_view, sources, strict=True
            ):
                strides = []
                step = itemsize
                for dim in reversed(shape):
                    strides.append(step)
                    step *= dim
                strides.reverse()
                views.append(view(source, native, tuple(shape), tuple(strides), offset))
            return total, views
        if mode == "layout":
            records = []
            for shape, offset, nbytes, resolved in zip(
                shapes, offsets, counts, dtypes, strict=True
            ):
                strides = []
                step = 1
                for dim in reversed(shape):
                    strides.append(step)
                    step *= dim
                strides.reverse()
                records.append(ViewLayout(tuple(shape), resolved, offset, nbytes, tuple(strides)))
            layout = Layout(tuple(records), total, alignment)
            return total, ADAPTER.typed_views(sources[0], layout)
        placed = []
        if mode == "tmin":
            for shape, offset, (_, _, itemsize, native) in zip(
                shapes, offsets, per_view, strict=True
            ):
                strides = []
                step = itemsize
                for dim in reversed(shape):
                    strides.append(step)
                    step *= dim
                strides.reverse()
                placed.append((offset, tuple(shape), tuple(strides), native))
            return total, serve_min(tuple(placed), sources, view)
        for shape, offset, resolved in zip(shapes, offsets, dtypes, strict=True):
            strides = []
            step = 1
            for dim in reversed(shape):
                strides.append(step)
                step *= dim
            strides.reverse()
            placed.append((offset, tuple(shape), tuple(strides), resolved))
        return total, serve_full(tuple(placed), sources, view)

    return build


_VIEW = re.compile(r"view\((src\d+), (native\d+), (\(.*?\)), (\(.*?\)), (o\d+)\)")


def generated(mode: str, plan: Any) -> Any:
    """The plan's generated code, its last line (the views) as ``mode`` says."""
    lines = plan.source.splitlines()
    assert lines[-1].startswith("    return total, [")
    entries = []
    for i, (_, native, shape, strides, offset) in enumerate(_VIEW.findall(lines[-1])):
        if mode == "tmin":
            entries.append(f"({offset}, {shape}, {strides}, {native})")
            continue
        size = resolve_dtype(plan.key[1][i][1]).itemsize
        inner = strides.strip("()").rstrip(",").split(", ")
        elements = ["1" if s == str(size) else s.replace(f"{size} * ", "", 1) for s in inner]
        comma = "," if len(elements) == 1 else ""
        entries.append(f"({offset}, {shape}, ({', '.join(elements)}{comma}), D{i})")
    lines[-1] = f"    return total, serve(({', '.join(entries)},), sources, view)"
    namespace: dict[str, Any] = {
        "view": ADAPTER.plan_view,
        "SEQUENCES": plans.SEQUENCES,
        "serve": serve_min if mode == "tmin" else serve_full,
    }
    for i, (_, dtype) in enumerate(plan.key[1]):
        namespace[f"native{i}"] = plan.natives[i]
        namespace[f"T{i}"] = dtype
        namespace[f"D{i}"] = resolve_dtype(dtype)
    exec(compile("\n".join(lines) + "\n", "<record prototype>", "exec"), namespace)
    return namespace["build"]


def front(mode: str, generate: bool) -> Any:
    """A NumPy front whose plan for :data:`STRUCTURE` is ``mode``'s."""
    ws = arena.Arena("cpu", framework="numpy")
    numpy = ws.numpy
    numpy.get_simultaneous(((1 << 17,), "float32"))  # presized: every request fits
    numpy.get_simultaneous(*STRUCTURE)
    # The plan is made at the structure's second sighting (sizes no bench request has).
    numpy.get_simultaneous(((5, 3), "float32"), ((1,), "int32"))
    plan = numpy._builder._plans[structure_of(STRUCTURE)]
    assert plan is not None
    if generate:
        plan.generate()
    else:
        plan.source = "(bench: the closure stays)"  # Plan.generate() is then a no-op
    if mode != "base":
        plan.build = (
            generated(mode, plan)
            if generate and mode != "rbase"
            else closure(mode, plan.key[1], 256)
        )
    numpy._builder._last_plan = plan
    return ws, numpy, plan


def main(argv: list[str]) -> None:
    """See the module docstring."""
    what, mode, generate, n = argv[0], argv[1], argv[2] == "1", int(argv[3])
    if what == "count":
        ws, numpy, _ = front(mode, generate)  # ws kept: a dropped arena closes
        get = numpy.get_simultaneous
        for k in range(n):
            get(*sizes(k))
        return
    against = "rbase" if mode in ("tmin", "tfull", "layout") and not generate else "base"
    kept = [front(mode, generate), front(against, generate)]
    for _, numpy, _ in kept:  # the same arrays either way
        views = numpy.get_simultaneous(((7, 6), "float32"), ((2,), "int32"))
        assert [(v.shape, v.strides, v.dtype) for v in views] == [
            ((7, 6), (24, 4), "float32"),
            ((2,), (4,), "int32"),
        ]
        assert views[1].ctypes.data - views[0].ctypes.data == 256
    per = 1000
    times: tuple[list[float], list[float]] = ([], [])
    gc.disable()
    for index in range(n):
        batch = [sizes(index * per + k) for k in range(per)]  # never seen: plan-served
        order = (0, 1) if index % 2 == 0 else (1, 0)
        for which in order:
            get = kept[which][1].get_simultaneous
            start = time.perf_counter()
            for specs in batch:
                get(*specs)
            times[which].append((time.perf_counter() - start) / per * 1e6)
    gc.enable()
    for ws, numpy, _ in kept:  # every request was the plan's: no bench request remembered
        remembered = ws._table.slots[0].buffer.prepared.get(numpy._builder.key, {})
        assert not any(len(specs) == 2 and specs[1][0][0] >= 3 for specs in remembered)
    paired = ratios(*times)
    print(
        f"{mode} against {against}, {'generated' if generate else 'closure'}: {paired} "
        f"({paired.top_us:.2f} against {paired.bottom_us:.2f} us, {paired.rounds} rounds)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
