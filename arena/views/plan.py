"""Per-structure plans: a request whose structure was seen before, but whose sizes are new,
is served by generated arithmetic instead of a full layout computation.

A request's *structure* is the number of views and, for each view, its number of
dimensions and its dtype. For each structure the plan generates (once) a small Python
function that unpacks the dimensions, checks each one is a plain non-negative ``int``,
computes every offset in closed form (the same arithmetic as
:func:`~arena.views.layout.compute_layout`: each view's bytes rounded up to the alignment,
offsets the running sum), checks the total against the buffer's capacity, and only then
builds the views with the adapter's view expression. Anything unusual (a float or bool
dimension, a request larger than the buffer, a dtype the adapter refuses) sends the
caller to the general path, which grows or explains the error.

The builder checks the request's structure itself (the spec count and shape lengths by
unpacking, each dtype by identity), so a front can try the plan it used last before it
computes a request's structure at all.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from arena.errors import ArenaError
from arena.views.dtypes import resolve_dtype
from arena.views.prepared import remember

__all__ = [
    "MAX_PLANS",
    "MAX_SERVER_FACTORIES",
    "Plan",
    "make_plan",
    "plan_for",
    "server",
    "server_factories",
    "structure_of",
]

#: Request structures whose plans a front keeps (oldest eighth dropped when full).
MAX_PLANS = 1024

#: build(specs, capacity, *sources) -> (total bytes, views); None when ``specs`` has another
#: structure (or raises ValueError/TypeError unpacking it); False when the structure
#: matches but the request needs the general path (a dimension that is not a plain
#: non-negative int, or more bytes than ``capacity``).
Builder = Callable[..., "tuple[int, list[Any]] | bool | None"]


class Plan:
    """The generated builder for one request structure on one adapter.

    Attributes
    ----------
    key : tuple
        ``(framework, structure)``: where a buffer caches this plan's view sources.
    natives : tuple
        The adapter's dtype per view.
    build : callable
        ``build(specs, capacity, *sources)`` -> ``(total, views)``, None (another
        structure) or False (take the general path); see :data:`Builder`.
    source : str
        The generated code, for inspection.
    """

    __slots__ = ("build", "key", "natives", "source")

    def __init__(
        self, key: tuple[Any, ...], natives: tuple[Any, ...], build: Builder, source: str
    ) -> None:
        self.key = key
        self.natives = natives
        self.build = build
        self.source = source


def plan_for(
    plans: dict[Any, Plan | None], specs: Any, adapter: ModuleType, alignment: int
) -> Plan | None:
    """The plan of ``specs``'s structure from ``plans`` (a front's), made and kept on first
    sight; None when the request has no plan (the general path serves it)."""
    structure = structure_of(specs)
    if structure is None:
        return None
    try:
        return plans[structure]
    except KeyError:
        pass
    except TypeError:  # an unhashable dtype object
        return None
    plan = make_plan(structure, adapter, alignment)
    remember(plans, structure, plan, MAX_PLANS)
    return plan


def structure_of(specs: Any) -> tuple[Any, ...] | None:
    """``((ndim, dtype), ...)`` of a request, or None when it is not a sequence of
    ``(shape, dtype)`` pairs (tuples or lists) with tuple or list shapes (the general path
    explains)."""
    structure = []
    try:
        for spec in specs:
            if not isinstance(spec, (tuple, list)) or len(spec) != 2:
                return None
            shape = spec[0]
            if not isinstance(shape, (tuple, list)):
                return None
            structure.append((len(shape), spec[1]))
    except TypeError:
        return None
    return tuple(structure)


def make_plan(structure: tuple[Any, ...], adapter: ModuleType, alignment: int) -> Plan | None:
    """Generate the builder for ``structure``, or None when the adapter has no view
    expression (an empty ``PLAN_EXPRESSION``) or a dtype does not resolve (the general
    path then raises the error)."""
    expression = adapter.PLAN_EXPRESSION
    if not expression or not structure:  # no views: the general path returns []
        return None
    try:
        dtypes = [resolve_dtype(dtype) for _, dtype in structure]
        natives = tuple(adapter.native_dtype(d) for d in dtypes)
    except (ArenaError, TypeError, ValueError):
        return None
    mask = alignment - 1
    unpack: list[str] = []
    checks: list[str] = []
    arithmetic: list[str] = []
    views: list[str] = []
    offset = "0"
    for i, ((ndim, _), dtype) in enumerate(zip(structure, dtypes, strict=True)):
        size = dtype.itemsize
        dims = [f"d{i}_{k}" for k in range(ndim)]
        comma = "," if ndim == 1 else ""
        unpack.append(f"    ({', '.join(dims)}{comma}) = s{i}")
        checks += [f"{d}.__class__ is not int or {d} < 0" for d in dims]
        arithmetic.append(f"    n{i} = {' * '.join(dims) if dims else '1'}")
        arithmetic.append(f"    o{i} = {offset}")
        offset = f"o{i} + ((n{i} * {size} + {mask}) & {~mask})"
        strides: list[str] = []
        step = ""
        for d in reversed(dims):
            strides.append(step or "1")
            step = f"{step} * ({d} or 1)" if step else f"({d} or 1)"
        strides.reverse()
        views.append(
            expression.format(
                src=f"src{i}",
                native=f"native{i}",
                shape=f"({', '.join(dims)}{comma})",
                strides=f"({', '.join(strides)}{comma})",
                offset=f"(o{i} // {size})",
                numel=f"n{i}",
                boffset=f"o{i}",
                bstrides=f"({', '.join(f'{s} * {size}' for s in strides)}{comma})",
            )
        )
    count = len(structure)
    same = [f"t{i} is not T{i} or not isinstance(s{i}, _SEQUENCE)" for i in range(count)]
    lines = [
        f"    ({', '.join(f'(s{i}, t{i})' for i in range(count))},) = specs",
        "    if (\n        " + "\n        or ".join(same) + "\n    ):\n        return None",
        *unpack,
    ]
    if checks:
        lines.append(
            "    if (\n        " + "\n        or ".join(checks) + "\n    ):\n        return False"
        )
    lines += arithmetic
    # A zero-size view with a huge other dimension is 0 bytes here, yet past what a
    # framework can index: the general path validates every dimension of such requests.
    lines.append(
        "    if " + " or ".join(f"not n{i}" for i in range(count)) + ":\n        return False"
    )
    lines.append(f"    total = {offset}")
    lines.append("    if total > capacity:\n        return False")
    lines.append(f"    return total, [{', '.join(views)}]")
    sources = ", ".join(f"src{i}" for i in range(len(structure)))
    header = f"def build(specs, capacity{', ' if sources else ''}{sources}):"
    code = "\n".join([header, *lines])
    namespace: dict[str, Any] = dict(adapter.PLAN_GLOBALS)
    namespace.update({f"native{i}": native for i, native in enumerate(natives)})
    namespace.update({f"T{i}": dtype for i, (_, dtype) in enumerate(structure)})
    namespace["_SEQUENCE"] = (tuple, list)
    filename = f"<arena plan {adapter.FRAMEWORK} {len(structure)} views>"
    exec(compile(code, filename, "exec"), namespace)
    return Plan((adapter.FRAMEWORK, structure), natives, namespace["build"], code)


#: (dimension counts, fresh expression) -> factory of servers. Engines use a handful; the
#: bound (oldest eighth dropped when full) guards against requests with ever-new shapes.
_SERVER_FACTORIES: dict[tuple[Any, ...], Callable[..., Callable[[Any], Any]]] = {}
MAX_SERVER_FACTORIES = 1024


def server_factories() -> int:
    """How many server factories are kept (bounded by :data:`MAX_SERVER_FACTORIES`)."""
    return len(_SERVER_FACTORIES)


def server(specs: Any, views: list[Any], expression: str, fresh: Any) -> Callable[[Any], Any]:
    """The function that serves a remembered request on a hit: ``serve(specs)`` checks that
    every dimension is a plain int (``2.0`` and ``True`` hash and compare like ``2`` and
    ``1``, so the exact-request lookup alone cannot tell) and returns fresh views, or None.

    Generated once per (dimension counts, ``expression``) and closed over ``views``: one
    call, straight-line checks and one view expression per view. ``expression`` formats
    ``{view}`` into a fresh view; empty means ``fresh(views)``.
    """
    ndims = tuple(len(shape) for shape, _ in specs)
    key = (ndims, expression)
    factory = _SERVER_FACTORIES.get(key)
    if factory is None:
        count = len(ndims)
        names = [f"v{i}" for i in range(count)]
        dims = [[f"d{i}_{k}" for k in range(n)] for i, n in enumerate(ndims)]
        body = [f"    ({', '.join(f'(s{i}, _)' for i in range(count))},) = specs"] if count else []
        body += [
            f"    ({', '.join(d)}{',' if len(d) == 1 else ''}) = s{i}" for i, d in enumerate(dims)
        ]
        checks = [f"{d}.__class__ is not int" for group in dims for d in group]
        if checks:
            body.append("    if " + " or ".join(checks) + ":\n        return None")
        if expression:
            body.append(f"    return [{', '.join(expression.format(view=v) for v in names)}]")
        else:
            body.append(f"    return fresh([{', '.join(names)}])")
        code = "\n".join(
            [f"def make({', '.join(['fresh', *names])}):", "  def serve(specs):"]
            + ["  " + line for line in body]
            + ["  return serve"]
        )
        namespace: dict[str, Any] = {}
        exec(compile(code, f"<arena server {count} views>", "exec"), namespace)
        factory = namespace["make"]
        remember(_SERVER_FACTORIES, key, factory, MAX_SERVER_FACTORIES)
    return factory(fresh, *views)
