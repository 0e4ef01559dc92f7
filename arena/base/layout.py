"""A request's numbers: what counts as a dimension or a count (the int rules), and the
layout arithmetic they guard, ``(shape, dtype)`` requests to aligned byte offsets.

The int rules, written once. A dimension served as it is (a remembered request's fast
paths) is *exactly* an ``int`` (:func:`exact_int`, :func:`exact_dims`, and
:func:`exact_dim_source` for generated code): ``2.0`` and ``True`` hash and compare like
``2`` and ``1``, and an int subclass or an object with ``__index__`` may say another number
later, so none of them may find what a plain request remembered; they take the validating
path (:func:`check_dim`), which also refuses whatever :func:`bool_like` says. A count, size
or setting (an alignment, say) is an ``int`` or int subclass but never a ``bool``
(:func:`int_not_bool`). The compiled hit path's mirror of the first rule is one C helper,
``arena_exact_int`` in ``arena/views/_hit_api.h`` (``PyLong_CheckExact``), which
``digest_of`` in ``arena/views/_hit.c`` and the region hits of
``arena/planning/_region_hit.c`` ask. tests/base/test_exact_int.py scans the
package for the rules written anywhere else. Every layer may import them.

The arithmetic. Standard library only. Every request is rounded up to the alignment,
offsets are the running sum starting at 0, and each view covers exactly its own
(unrounded) bytes. Layouts are memoised per signature, so a request seen before costs one
dictionary lookup plus a type check of its dimensions.
"""

from __future__ import annotations

import itertools
import numbers
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from arena.base.dtypes import DType, resolve_dtype
from arena.errors import ConfigError, SpecError

__all__ = [
    "DEFAULT_ALIGNMENT",
    "MAX_ALIGNMENT",
    "MAX_BYTES",
    "MIN_ALIGNMENT",
    "Layout",
    "ViewLayout",
    "bool_like",
    "check_alignment",
    "check_dim",
    "clear_layout_memo",
    "compute_layout",
    "exact_dim_source",
    "exact_dims",
    "exact_int",
    "int_not_bool",
    "past_address_range",
    "plain_int_fix",
    "round_up",
    "shifted",
    "str_bytes_fix",
]

DEFAULT_ALIGNMENT = 256
MIN_ALIGNMENT = 16
#: Largest alignment accepted: 1 GiB, far beyond any page or huge page.
MAX_ALIGNMENT = 1 << 30
#: Largest byte count a layout may reach: frameworks index memory with signed 64-bit ints.
MAX_BYTES = 2**63 - 1
_MEMO_LIMIT = 4096
_CLASS_OF = operator.attrgetter("__class__")
_DTYPE_OF = operator.itemgetter(1)
_SEQUENCES = (tuple, list)


# The int rules (the module docstring): what counts as a dimension, a count or a setting.


def exact_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is exactly an ``int`` (not a bool, an int subclass or a float)."""
    return value.__class__ is int


def exact_dims(shape: Any) -> bool:
    """Whether every dimension in ``shape`` (an iterable) is exactly an ``int``: the test a
    remembered request's fast paths apply before serving it."""
    for dim in shape:  # noqa: SIM110 - a loop: all() over a generator costs more on a hit
        if dim.__class__ is not int:
            return False
    return True


def exact_dim_source(name: str) -> str:
    """The source text of :func:`exact_dims`' test for one dimension named ``name``, negated
    (true when ``name`` is NOT exactly an ``int``): for servers generated as straight-line
    code, where a call per dimension would cost what the generation saves."""
    return f"{name}.__class__ is not int"


def int_not_bool(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` or an int subclass (an ``IntEnum`` member) other than
    ``bool``: the rule for counts, sizes and settings."""
    return isinstance(value, int) and not isinstance(value, bool)


def plain_int_fix(value: Any) -> str:
    """What an error refusing ``value`` for a count, size or setting adds when ``value`` is
    an integer of another type (a NumPy integer: "must be an int, got np.int64(2)" reads
    as a contradiction), or a whole float in range (``reserve_bytes(1e9)``,
    ``max_bytes=8e9``): that it is no Python int and the call that makes one; else ''."""
    whole = isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_BYTES
    if whole or (
        isinstance(value, numbers.Integral) and not (int_not_bool(value) or bool_like(value))
    ):
        return f" ({type(value).__name__} is not a Python int: pass int(...) of it, {int(value)})"
    return ""


def str_bytes_fix(value: Any) -> str:
    """What an error refusing ``value`` for a byte count adds when ``value`` is a string
    (``reserve_bytes("4096")``, ``reserve_bytes("1GB")``, found by a new user: the message
    said only "must be an int >= 0, got '1GB'"): the int to pass; else ''."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    # ASCII digits only (str.isdigit takes other scripts' digits), and few enough that
    # int() of them is quick and in range.
    if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_BYTES)):
        return f" (str is not a Python int: pass int(...) of it, {int(text)})"
    return " (a str: pass the number of bytes as an int, such as 1 << 30 for 1 GiB)"


def bool_like(value: Any) -> bool:
    """Whether ``value`` is a bool of any framework: Python's, NumPy's (``bool_`` in NumPy 1,
    ``bool`` in NumPy 2), or an array or tensor of a bool dtype."""
    kind = getattr(value, "dtype", None)
    return (
        isinstance(value, bool)
        or type(value).__name__ in ("bool", "bool_")
        or (kind is not None and "bool" in str(kind))
    )


@dataclass(frozen=True, slots=True)
class ViewLayout:
    """Where one view lives in a slot buffer.

    Attributes
    ----------
    shape : tuple of int
        The view's shape.
    dtype : DType
        The view's dtype.
    offset : int
        Byte offset of the view's first element from the start of the buffer.
    nbytes : int
        Exact bytes the view covers (``prod(shape) * itemsize``, not rounded).
    strides : tuple of int
        C-contiguous strides in elements.
    """

    shape: tuple[int, ...]
    dtype: DType
    offset: int
    nbytes: int
    strides: tuple[int, ...]

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """C-contiguous strides in bytes."""
        return tuple(map(self.dtype.itemsize.__mul__, self.strides))


@dataclass(frozen=True, slots=True)
class Layout:
    """The placement of several views in one buffer.

    Attributes
    ----------
    views : tuple of ViewLayout
        One entry per request, in request order.
    total : int
        Bytes the buffer must hold: the sum of every request rounded up to ``alignment``.
    alignment : int
        The alignment every offset is a multiple of.
    """

    views: tuple[ViewLayout, ...]
    total: int
    alignment: int


_MEMO: dict[tuple[Any, int], tuple[Layout, tuple[type, ...]]] = {}
# Guards the memo's check, sweep and insert (lookups need no lock): two threads sweeping at
# once would each drop a quarter, and one could find the keys it listed gone. Re-entrant: a
# signal handler or a dtype's __hash__ may lay out a request while this thread holds it.
_MEMO_LOCK = threading.RLock()


def clear_layout_memo() -> None:
    """Forget every memoised layout (for benchmarks that time the computation itself)."""
    with _MEMO_LOCK:
        _MEMO.clear()


def round_up(nbytes: int, alignment: int) -> int:
    """Round ``nbytes`` up to a multiple of ``alignment`` (a power of two)."""
    return (nbytes + alignment - 1) & ~(alignment - 1)


def past_address_range(what: str, total: int, fix: str) -> SpecError:
    """The error for a request that reaches ``total`` bytes (rounded up to its
    alignment), more than a buffer can address (:data:`MAX_BYTES`): ``what`` leads up to
    the value (``"spec #0 brings the layout to"``), ``fix`` says what to do. One wording
    for plain requests and the blocks asked for in bytes (library workspaces, Triton's),
    so an impossible size is never reported as memory running out."""
    return SpecError(f"{what} {total} bytes, more than the {MAX_BYTES} a buffer can address; {fix}")


def shifted(layout: Layout, base: int) -> Layout:
    """``layout`` moved ``base`` bytes up the buffer (``base`` a multiple of its alignment):
    every offset and the total grow by ``base``."""
    views = tuple(
        ViewLayout(v.shape, v.dtype, v.offset + base, v.nbytes, v.strides) for v in layout.views
    )
    return Layout(views, layout.total + base, layout.alignment)


def check_alignment(alignment: Any) -> int:
    """Validate an alignment: a power of two from :data:`MIN_ALIGNMENT` to
    :data:`MAX_ALIGNMENT` bytes.

    Raises
    ------
    ConfigError
        With the value and the nearest valid alignment.
    """
    if not int_not_bool(alignment):
        if _is_pair(alignment):
            # compute_layout(spec0, spec1), written like get_simultaneous, reads spec1 as
            # the alignment: say so, not only that a tuple is no power of two.
            raise ConfigError(
                f"compute_layout() got the spec {alignment!r} as its alignment: it takes "
                "the specs as one sequence, compute_layout((spec0, spec1, ...)), and the "
                "alignment second, e.g. compute_layout(specs, alignment=256)"
            )
        raise ConfigError(
            f"alignment must be an int power of two >= {MIN_ALIGNMENT}, got "
            f"{alignment!r} {plain_int_fix(alignment).strip() or f'({type(alignment).__name__})'}"
            f"; use e.g. alignment={DEFAULT_ALIGNMENT}"
        )
    if alignment > MAX_ALIGNMENT:
        raise ConfigError(
            f"alignment must be at most {MAX_ALIGNMENT} (1 GiB), got {alignment}; offsets "
            f"are rounded up to it, so use e.g. alignment={DEFAULT_ALIGNMENT} or 4096"
        )
    if alignment < MIN_ALIGNMENT or alignment & (alignment - 1):
        suggestion = max(MIN_ALIGNMENT, 1 << max(0, alignment - 1).bit_length())
        raise ConfigError(
            f"alignment must be a power of two >= {MIN_ALIGNMENT}, got {alignment}; "
            f"use alignment={suggestion}"
        )
    return alignment


def compute_layout(specs: Sequence[Any], alignment: int = DEFAULT_ALIGNMENT) -> Layout:
    """Lay out ``(shape, dtype)`` requests in one buffer.

    Parameters
    ----------
    specs : sequence of (shape, dtype)
        ``shape`` is a tuple of non-negative ints, ``dtype`` anything
        :func:`~arena.base.dtypes.resolve_dtype` accepts.
    alignment : int, optional
        Power of two from 16 to 2**30 that every offset is a multiple of (default 256).

    Returns
    -------
    Layout
        Memoised: the same signature returns the same object.

    Raises
    ------
    SpecError
        For malformed specs, negative or non-integer dimensions, or layouts too large.
    ConfigError
        For an invalid alignment.
    DTypeError
        For unknown dtypes.
    """
    key = (specs, alignment)
    try:
        layout, kinds = _MEMO[key]
    except (KeyError, TypeError):
        return _compute_and_memoise(specs, alignment)
    # 1.0 == 1 and True == 1 hash alike: a hit only counts for plain int dimensions, exact
    # tuple shapes and dtypes of the memoised dtypes' own classes (an object of another
    # class, a str subclass or not, may equal a name and hash like it, and mean another
    # dtype or none).
    for (shape, dtype), kind in zip(specs, kinds, strict=True):
        if shape.__class__ is not tuple or dtype.__class__ is not kind:
            return _compute_and_memoise(specs, alignment)
        if not exact_dims(shape):
            return _compute_and_memoise(specs, alignment)
    return layout


def _compute_and_memoise(specs: Any, alignment: int) -> Layout:
    """Compute and memoise ``specs``' layout.

    A request of exact-int shapes in range takes the straight path, written in this one
    function: its shapes checked (:func:`exact_dims`), its dtypes resolved,
    then the arithmetic (a first request calls out to :mod:`arena.base.dtypes` once, and to
    nothing of this module's after).
    Anything else, and any error, takes :func:`_validated`, which checks spec by spec and
    raises the message of the first spec that is wrong."""
    check_alignment(alignment)
    canonical: list[Any] | None = []
    try:
        if specs.__class__ not in _SEQUENCES:
            raise _Unusual
        for spec in specs:
            if spec.__class__ not in _SEQUENCES or len(spec) != 2:
                raise _Unusual
            shape = spec[0]
            if shape.__class__ not in _SEQUENCES or not exact_dims(shape):
                raise _Unusual
            for dim in shape:
                if dim < 0 or dim > MAX_BYTES:
                    raise _Unusual
        dtypes = []
        for spec in specs:
            dtypes.append(resolve_dtype(spec[1]))
        views: list[ViewLayout] = []
        offset = 0
        mask = alignment - 1
        for (raw_shape, raw), dtype in zip(specs, dtypes, strict=True):
            itemsize = dtype.itemsize
            count = extent = itemsize
            strides = []
            for dim in reversed(raw_shape):  # C-contiguous; a zero dimension counts as 1
                strides.append(extent // itemsize)
                count *= dim
                extent *= dim or 1
            if extent > MAX_BYTES:
                raise _Unusual
            strides.reverse()
            shape = tuple(raw_shape)
            views.append(ViewLayout(shape, dtype, offset, count, tuple(strides)))
            offset += (count + mask) & ~mask
            if offset > MAX_BYTES:
                raise _Unusual
            if canonical is not None:
                if isinstance(raw, str) and raw.__class__ is not str:
                    canonical = None  # a str subclass must never key what a plain name finds
                else:
                    canonical.append((shape, raw))
        layout = Layout(tuple(views), offset, alignment)
    except Exception:  # _Unusual, or a dtype's error: the spec-by-spec path explains
        layout, canonical = _validated(specs, alignment)
    if canonical is None:
        return layout
    # Each spec's dtype class, in C (no comprehension's frame on a first request's path).
    kinds = tuple(map(_CLASS_OF, map(_DTYPE_OF, canonical)))
    try:
        key = (tuple(canonical), alignment)
        hash(key)  # a dtype's __hash__ runs outside the lock
    except TypeError:  # unhashable dtype object: valid, just not memoisable
        return layout
    with _MEMO_LOCK:
        if len(_MEMO) >= _MEMO_LIMIT:
            # Drop the oldest quarter, never the whole memo: a working set that fits stays.
            for old in list(itertools.islice(_MEMO, _MEMO_LIMIT // 4)):
                _MEMO.pop(old, None)  # a re-entrant sweep may have dropped it
        _MEMO[key] = (layout, kinds)
    return layout


class _Unusual(Exception):
    """A request the straight path of :func:`_compute_and_memoise` leaves to
    :func:`_validated`."""


def _validated(specs: Any, alignment: int) -> tuple[Layout, list[Any] | None]:
    """The layout of ``specs``, checked spec by spec (the first wrong spec raises), and
    its memo key's specs (None: not to be memoised)."""
    if not isinstance(specs, (tuple, list)):
        raise SpecError(
            f"specs must be a sequence of (shape, dtype) tuples, got {type(specs).__name__}"
        )
    views: list[ViewLayout] = []
    offset = 0
    canonical = []
    for index, spec in enumerate(specs):
        shape, dtype = _split_spec(index, spec)
        nbytes = _count_bytes(index, shape, dtype)
        views.append(ViewLayout(shape, dtype, offset, nbytes, _c_strides(shape)))
        offset += round_up(nbytes, alignment)
        if offset > MAX_BYTES:
            raise past_address_range(
                f"spec #{index} brings the layout to",
                offset,
                "split the request or shrink the shapes",
            )
        canonical.append((shape, spec[1]))
    layout = Layout(tuple(views), offset, alignment)
    if [d for _, d in canonical if isinstance(d, str) and d.__class__ is not str]:
        return layout, None  # a str subclass must never key what a plain name finds
    return layout, canonical


#: The hint for specs given as one sequence: get_simultaneous([spec0, spec1]).
_ONE_SEQUENCE = (
    "the specs look like they were passed as one sequence; pass each (shape, dtype) as its "
    "own argument, get_simultaneous(spec0, spec1, ...) or get_simultaneous(*specs)"
)


def _is_pair(item: Any) -> bool:
    """Whether ``item`` reads as one (shape, dtype) spec: a 2-item sequence led by a shape."""
    return isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], (tuple, list))


def _split_spec(index: int, spec: Any) -> tuple[tuple[int, ...], DType]:
    if not isinstance(spec, (tuple, list)) or len(spec) != 2:
        # One spec (or three) wrapped in a list reads as a spec of the wrong length;
        # two wrapped reach check_dim, which says the same.
        # (A list, not all() of a generator: tests/test_generator_interrupts.py.)
        if isinstance(spec, (tuple, list)) and spec and not [s for s in spec if not _is_pair(s)]:
            raise SpecError(
                f"spec #{index} is {len(spec)} (shape, dtype) pair(s) in one "
                f"{type(spec).__name__}, {spec!r}: {_ONE_SEQUENCE}"
            )
        raise SpecError(
            f"spec #{index} must be a (shape, dtype) tuple (or 2-item list), got {spec!r}; "
            "write e.g. ((4, 128), 'float32')"
        )
    raw_shape, raw_dtype = spec
    if int_not_bool(raw_shape) and int_not_bool(raw_dtype):
        raise SpecError(
            f"spec #{index} is {spec!r}, a shape without its dtype: each argument is one "
            f"view's (shape, dtype) pair, as in get_simultaneous(({tuple(spec)!r}, "
            "'float32'))"
        )
    if not isinstance(raw_shape, (tuple, list)):
        hint = f"({raw_shape!r},)" if isinstance(raw_shape, int) else "a tuple such as (4, 128)"
        raise SpecError(
            f"spec #{index}: shape must be a tuple or list of ints, got "
            f"{type(raw_shape).__name__} {raw_shape!r}; pass {hint}"
        )
    shape = tuple(check_dim(index, axis, dim) for axis, dim in enumerate(raw_shape))
    return shape, resolve_dtype(raw_dtype)


def check_dim(index: int, axis: int, dim: Any) -> int:
    """Dimension ``axis`` of spec ``index`` as a plain ``int`` from 0 to :data:`MAX_BYTES`.

    An exact ``int`` is taken as it is; an integer-like (a NumPy integer, a 0-d integer
    tensor, an object with ``__index__``) is taken as ``operator.index`` of it.

    Raises
    ------
    SpecError
        For a bool (Python, NumPy, or a bool array or tensor), an array or tensor that is not
        0-d (even one element), a tuple or list, a float or anything else without
        ``__index__``, a negative value or one above :data:`MAX_BYTES`; the message names
        the spec, the dimension, the value and the fix.
    """
    if exact_int(dim) and 0 <= dim <= MAX_BYTES:
        return int(dim)
    kind = getattr(dim, "dtype", None)  # a NumPy array or scalar, a torch tensor
    if bool_like(dim):
        raise SpecError(f"spec #{index}: dimension {axis} is a bool ({dim!r}); pass an int")
    shape = getattr(dim, "shape", ())
    if kind is not None and shape not in ((), None):  # __index__ takes one-element tensors
        raise SpecError(
            f"spec #{index}: dimension {axis} is a {type(dim).__name__} of shape "
            f"{tuple(shape)}, not a scalar; pass an int (e.g. int(x.item()) of a "
            "one-element array)"
        )
    if isinstance(dim, (tuple, list)):
        raise SpecError(f"spec #{index}: dimension {axis} is a tuple {dim!r}: {_ONE_SEQUENCE}")
    try:
        value = operator.index(dim)
    except TypeError:
        fix = ""
        # "use N" only where N is a size a dimension may have: text of up to 19 digits
        # (int() of text past sys.get_int_max_str_digits raises ValueError, and longer
        # text is past MAX_BYTES anyway), a whole float, either from 0 to MAX_BYTES.
        text = dim.strip() if isinstance(dim, str) else ""
        if isinstance(dim, float) and dim.is_integer() and 0 <= int(dim) <= MAX_BYTES:
            fix = f"; use {int(dim)}"
        elif text.isdecimal() and text.isascii() and len(text) <= 19 and int(text) <= MAX_BYTES:
            fix = f"; use {int(text)}"  # a size read from text or a config file
        elif dim is None:  # an unknown size, as ONNX and symbolic shapes spell it
            fix = "; every dimension needs its size: pass the int (arena does not infer dimensions)"
        raise SpecError(
            f"spec #{index}: dimension {axis} must be an int, got {type(dim).__name__} {dim!r}{fix}"
        ) from None
    if value < 0:
        raise SpecError(
            f"spec #{index}: dimension {axis} is negative ({value}); sizes are >= 0 "
            "(arena does not infer -1 dimensions)"
        )
    if value > MAX_BYTES:
        raise SpecError(f"spec #{index}: dimension {axis} = {value} exceeds {MAX_BYTES}")
    return value


def _count_bytes(index: int, shape: tuple[int, ...], dtype: DType) -> int:
    count = dtype.itemsize
    extent = dtype.itemsize  # the frameworks index every dimension: zeros do not excuse
    for dim in shape:
        count *= dim
        extent *= max(dim, 1)
    if extent > MAX_BYTES:
        raise SpecError(
            f"spec #{index}: shape {shape} of {dtype.name} spans {extent} bytes of strides, "
            f"more than the {MAX_BYTES} a framework can index (even with a zero dimension); "
            "the shape probably overflowed upstream"
        )
    return count


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))
