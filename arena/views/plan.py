"""Per-structure plans: a request whose structure was seen before, but whose sizes are new,
is served by precomputed arithmetic instead of a full layout computation.

A request's *structure* is the number of views and, for each view, its number of
dimensions and its dtype. A plan checks that a request has its structure, that every
dimension is a plain non-negative ``int``, computes every offset in closed form (the same
arithmetic as :func:`~arena.base.layout.compute_layout`: each view's bytes rounded up to
the alignment, offsets the running sum), checks the total against the buffer's capacity,
and only then builds the views with the adapter's ``plan_view``. Anything unusual (a float
or bool dimension, a zero-size view, a request larger than the buffer) sends the caller to
the general path, which grows or explains the error. An error inside a plan is an error:
the structure is checked without catching anything, so nothing a plan raises is mistaken
for "another structure".

A plan is never more expensive to start than the general path it replaces:

1. a structure seen for the first time gets a *closure* over its per-view constants (no
   code generated): building three views costs a few microseconds, less than the general
   path's layout computation alone;
2. a structure its plan has served :data:`GENERATE_AFTER` times, and that is small (at
   most :data:`MAX_GENERATED_VIEWS` views of at most :data:`MAX_GENERATED_DIMS`
   dimensions), gets straight-line generated code (about three times faster than the
   closure for three views). Compiling it costs about what the closure lost over those
   builds; larger structures keep their closure.

The server that hands out a remembered request's views again on the pure-Python hit path
(:func:`server`) is one loop over the request for every structure, the mirror of the
compiled hit path's check. Generated code is registered with :mod:`linecache` under a
name that says what it is, so tracebacks show its source.
"""

from __future__ import annotations

import hashlib
import linecache
from collections.abc import Callable
from typing import Any

from arena.base.dtypes import resolve_dtype
from arena.base.layout import MAX_BYTES, Layout, ViewLayout, exact_dim_source, exact_dims
from arena.errors import ArenaError

__all__ = [
    "GENERATE_AFTER",
    "MAX_GENERATED_DIMS",
    "MAX_GENERATED_VIEWS",
    "MAX_PLANS",
    "MAX_SOURCES",
    "SEQUENCES",
    "Plan",
    "generated",
    "make_plan",
]

#: Request structures whose plans a front keeps (oldest eighth dropped when full).
MAX_PLANS = 1024
#: Builds by its closure after which a small structure's plan generates code.
GENERATE_AFTER = 64
#: The largest structure that gets generated code: views, and dimensions per view.
MAX_GENERATED_VIEWS = 16
MAX_GENERATED_DIMS = 8

#: build(specs, capacity, sources) -> (total bytes, views); None when ``specs`` has another
#: structure; False when the structure matches but the request needs the general path (a
#: dimension that is not a plain non-negative int, a zero-size view, or a layout past
#: :data:`~arena.base.layout.MAX_BYTES`); the request's placement, a
#: :class:`~arena.base.layout.Layout`, when it needs more than ``capacity`` bytes (the
#: caller grows the slot and places it). ``sources`` holds one view source per view
#: (``Adapter.plan_source``), or is None where the caller has not made them over this
#: buffer yet: then True where the request fits (the caller makes them and builds again),
#: so no sources are made over a buffer the request is about to replace.
Builder = Callable[
    [Any, int, tuple[Any, ...] | None], "tuple[int, list[Any]] | Layout | bool | None"
]

#: What a request's ``(shape, dtype)`` pair and a shape may be: a tuple or a list.
SEQUENCES = (tuple, list)


class Plan:
    """How requests of one structure are built on one adapter.

    Attributes
    ----------
    key : tuple
        ``(space, structure)``: where a buffer caches this plan's view sources (``space``
        the adapter's, ``Adapter.space``: its framework's name, or its own).
    natives : tuple
        The adapter's dtype per view.
    build : callable
        ``build(specs, capacity, sources)`` -> ``(total, views)``, None (another
        structure), False (take the general path), the placement (more than
        ``capacity``) or True (it fits, ``sources`` None); see :data:`Builder`.
    source : str
        The generated code, once there is some ("" while the plan is a closure).
    uses : int
        Requests the plan built.
    """

    __slots__ = ("_adapter", "_alignment", "build", "key", "natives", "source", "uses")

    def __init__(self, key: tuple[Any, ...], adapter: Any, alignment: int) -> None:
        self.key = key
        self._adapter = adapter
        self._alignment = alignment
        # Raises what resolving a dtype raises (make_plan turns that into "no plan").
        self.build: Builder
        self.build, self.natives = _closure(key[1], adapter, alignment)
        self.source = ""
        self.uses = 0

    def built(self) -> None:
        """Count a request the plan built; at :data:`GENERATE_AFTER`, a small structure's
        closure is replaced by generated code."""
        self.uses += 1
        if self.uses == GENERATE_AFTER and _small(ndim for ndim, _ in self.key[1]):
            self.generate()

    def generate(self) -> None:
        """Replace the closure by generated straight-line code (idempotent)."""
        if not self.source:
            self.build, self.source = _generated_builder(
                self.key[1], self.natives, self._adapter, self._alignment, self.build
            )


def make_plan(structure: tuple[Any, ...], adapter: Any, alignment: int) -> Plan | None:
    """The plan for ``structure``, or None when the adapter has no ``plan_view`` (JAX) or
    a dtype does not resolve (the general path then raises the error). Generates no code:
    see :meth:`Plan.built`."""
    if adapter.plan_view is None or not structure:  # no views: the general path returns []
        return None
    try:
        return Plan((adapter.space, structure), adapter, alignment)
    except (ArenaError, TypeError, ValueError):
        return None


def _small(ndims: Any) -> bool:
    """Whether a structure with these dimension counts gets generated code."""
    for count, ndim in enumerate(ndims, 1):
        if ndim > MAX_GENERATED_DIMS or count > MAX_GENERATED_VIEWS:
            return False
    return True


def _closure(
    structure: tuple[Any, ...], adapter: Any, alignment: int
) -> tuple[Builder, tuple[Any, ...]]:
    """The builder of a structure as a closure over its per-view constants, and the
    adapter's dtype per view. Every dtype is resolved first, then every native dtype, in
    loops (not generator expressions): a first request calls out to
    :mod:`arena.base.dtypes` and the adapter once each, in turn."""
    view = adapter.plan_view
    in_bytes = adapter.plan_in_bytes
    dtypes = []
    for _, dtype in structure:
        dtypes.append(resolve_dtype(dtype))
    natives = []
    for resolved in dtypes:
        natives.append(adapter.native_dtype(resolved))
    constants = []
    for (ndim, dtype), resolved, native in zip(structure, dtypes, natives, strict=True):
        constants.append((ndim, dtype, resolved.itemsize, native))
    per_view = tuple(constants)
    count = len(per_view)
    mask = alignment - 1

    def build(specs: Any, capacity: int, sources: tuple[Any, ...] | None) -> Any:
        if len(specs) != count:
            return None
        sizes = []
        for spec, (ndim, want, _, _) in zip(specs, per_view, strict=True):
            if spec.__class__ not in SEQUENCES or len(spec) != 2:
                return None
            shape, dtype = spec
            if dtype is not want or shape.__class__ not in SEQUENCES or len(shape) != ndim:
                return None
            sizes.append(shape)
        offsets = []
        counts = []
        total = 0
        for shape, (_, _, itemsize, _) in zip(sizes, per_view, strict=True):
            if not exact_dims(shape):
                return False
            numel = 1
            for dim in shape:
                if dim < 0:
                    return False
                numel *= dim
            if not numel:
                # A zero-size view with a huge other dimension is 0 bytes here, yet past
                # what a framework can index: the general path validates it.
                return False
            offsets.append(total)
            counts.append(numel * itemsize)
            total += (numel * itemsize + mask) & ~mask
        if total > capacity:
            if total > MAX_BYTES:  # every dimension is at least 1: each is below the total
                return False
            # The placement, for the caller to grow the slot to (compute_layout's record
            # and arithmetic, written here: the first request of a structure computes it
            # once).
            placed = []
            for shape, offset, nbytes, resolved in zip(sizes, offsets, counts, dtypes):  # noqa: B905
                strides = []
                step = 1
                for dim in reversed(shape):
                    strides.append(step)
                    step *= dim
                strides.reverse()
                placed.append(ViewLayout(tuple(shape), resolved, offset, nbytes, tuple(strides)))
            return Layout(tuple(placed), total, alignment)
        if sources is None:
            return True
        views = []
        for shape, offset, (_, _, itemsize, native), source in zip(
            sizes, offsets, per_view, sources, strict=True
        ):
            strides = []
            step = itemsize if in_bytes else 1
            for dim in reversed(shape):
                strides.append(step)
                step *= dim
            strides.reverse()
            views.append(
                view(
                    source,
                    native,
                    tuple(shape),
                    tuple(strides),
                    offset if in_bytes else offset // itemsize,
                )
            )
        return total, views

    return build, tuple(natives)


def _generated_builder(
    structure: tuple[Any, ...],
    natives: tuple[Any, ...],
    adapter: Any,
    alignment: int,
    placement: Builder,
) -> tuple[Builder, str]:
    """Straight-line code for one structure: the closure's work without its loops."""
    mask = alignment - 1
    in_bytes = adapter.plan_in_bytes
    count = len(structure)
    checks: list[str] = []
    unpack: list[str] = []
    dims_ok: list[str] = []
    arithmetic: list[str] = []
    views: list[str] = []
    offset = "0"
    for i, (ndim, dtype) in enumerate(structure):
        size = resolve_dtype(dtype).itemsize
        dims = [f"d{i}_{k}" for k in range(ndim)]
        comma = "," if ndim == 1 else ""
        checks.append(f"t{i} is not T{i} or s{i}.__class__ not in SEQUENCES or len(s{i}) != {ndim}")
        if dims:
            unpack.append(f"    ({', '.join(dims)}{comma}) = s{i}")
        dims_ok += [f"{exact_dim_source(d)} or {d} < 0" for d in dims]
        arithmetic.append(f"    n{i} = {' * '.join(dims) if dims else '1'}")
        arithmetic.append(f"    o{i} = {offset}")
        offset = f"o{i} + ((n{i} * {size} + {mask}) & {~mask})"
        unit = size if in_bytes else 1
        strides: list[str] = []
        step = str(unit)
        for d in reversed(dims):
            strides.append(step)
            step = f"{step} * {d}" if step != "1" else d
        strides.reverse()
        start = f"o{i}" if in_bytes else f"o{i} // {size}"
        views.append(
            f"view(src{i}, native{i}, ({', '.join(dims)}{comma}), "
            f"({', '.join(strides)}{comma}), {start})"
        )
    pairs = ", ".join(f"p{i}" for i in range(count))
    lines = [
        "def build(specs, capacity, sources):",
        f"    if len(specs) != {count}:",
        "        return None",
        f"    ({pairs},) = specs",
        "    if (\n        "
        + "\n        or ".join(
            f"p{i}.__class__ not in SEQUENCES or len(p{i}) != 2" for i in range(count)
        )
        + "\n    ):\n        return None",
        f"    ({', '.join(f'(s{i}, t{i})' for i in range(count))},) = ({pairs},)",
        "    if (\n        " + "\n        or ".join(checks) + "\n    ):\n        return None",
        *unpack,
    ]
    if dims_ok:
        lines.append(
            "    if (\n        " + "\n        or ".join(dims_ok) + "\n    ):\n        return False"
        )
    lines += arithmetic
    # A zero-size view with a huge other dimension is 0 bytes here, yet past what a
    # framework can index: the general path validates every dimension of such requests.
    lines.append(
        "    if " + " or ".join(f"not n{i}" for i in range(count)) + ":\n        return False"
    )
    lines.append(f"    total = {offset}")
    # More than the buffer holds: the closure computes the placement (a rare case).
    lines.append("    if total > capacity:\n        return placement(specs, capacity, sources)")
    lines.append("    if sources is None:\n        return True")
    lines.append(f"    ({', '.join(f'src{i}' for i in range(count))},) = sources")
    lines.append(f"    return total, [{', '.join(views)}]")
    namespace: dict[str, Any] = {
        "view": adapter.plan_view,
        "SEQUENCES": SEQUENCES,
        "placement": placement,
    }
    namespace.update({f"native{i}": native for i, native in enumerate(natives)})
    namespace.update({f"T{i}": dtype for i, (_, dtype) in enumerate(structure)})
    code = "\n".join(lines) + "\n"
    generated(code, f"plan {adapter.framework} {count} views", namespace)
    return namespace["build"], code


#: The most generated sources kept in :mod:`linecache` (the oldest go first).
MAX_SOURCES = 4096
_SOURCES: dict[str, None] = {}


def generated(code: str, what: str, namespace: dict[str, Any]) -> None:
    """Compile and run ``code`` in ``namespace``, registered with :mod:`linecache` so that
    tracebacks and debuggers show its lines (the name says ``what`` it is and carries a
    digest of the code: the same code shares one entry; at most :data:`MAX_SOURCES`)."""
    digest = hashlib.sha1(code.encode(), usedforsecurity=False).hexdigest()[:12]
    filename = f"<arena {what} {digest}>"
    # mtime None: linecache.checkcache keeps the entry (there is no file to check).
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    _SOURCES.pop(filename, None)
    _SOURCES[filename] = None
    while len(_SOURCES) > MAX_SOURCES:
        try:  # another thread may trim at the same time
            oldest = next(iter(_SOURCES))
            del _SOURCES[oldest]
        except (KeyError, RuntimeError, StopIteration):
            break
        linecache.cache.pop(oldest, None)
    exec(compile(code, filename, "exec"), namespace)
