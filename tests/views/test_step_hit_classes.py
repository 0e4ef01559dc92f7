"""A replayed step request that equals a remembered one but is made of objects of other
classes: the compiled step hit (``step_serve`` in ``arena/planning/_region_hit.c``, its memo and
``same_classes``) leaves it to the Python path exactly where the pure-Python hit does,
and both give the views or the error a request made fresh would give (issue 26 item 4).

A dtype object of another class may compare and hash like a remembered dtype name and
mean another dtype or none; a float or a NumPy integer compares and hashes like the int
it stands for. Before the layout memo compared the dtypes' classes, an object equal to
``"float32"`` (of no dtype at all) was laid out as float32 once ``"float32"`` had been
laid out, on the Python path too, so removing ``same_classes`` from the compiled hit went
unnoticed: both paths then served float32 views.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.views import hit
from tests.conftest import need_compiled_hit

F32 = "float32"


class _LooksLikeFloat32:
    """Equal to ``"float32"`` and hashing like it, but no dtype."""

    def __eq__(self, other: object) -> bool:
        return bool(other == F32)

    def __hash__(self) -> int:
        return hash(F32)


LOOKALIKES: list[tuple[str, Any]] = [
    ("dtype object equal to the name", ((64,), _LooksLikeFloat32())),
    ("float dimension", ((64.0,), F32)),
    ("numpy integer dimension", ((np.int64(64),), F32)),
    ("bool-like dimension", ((True,), F32)),
    ("the remembered request", ((64,), F32)),
]


def _outcomes(path: str, locked: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Per look-alike: a replay of step "k" whose second request is it (its first, a
    plain request, warms the hit and its memo); the views' offset, shape and dtype, or
    the error's type and message."""
    monkeypatch.setattr(hit, "HIT_PATH", path)
    out: list[Any] = []
    for _, spec in LOOKALIKES:
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(4):  # record, plan, replay, replay: the caches and the memo
                with ws.step("k") as step:
                    step.get_simultaneous(((16,), F32))
                    step.get_simultaneous(((64,), F32))
            if locked:
                ws.lock()
            base = ws.numpy._select().buffer.allocation.ptr
            with ws.step("k") as step:
                step.get_simultaneous(((16,), F32))
                try:
                    (view,) = step.get_simultaneous(spec)
                except Exception as error:  # which error, and its words, are compared
                    out.append((type(error).__name__, str(error)))
                else:
                    offset = view.__array_interface__["data"][0] - base
                    out.append((offset, view.shape, str(view.dtype)))
    return out


@pytest.mark.parametrize("locked", [False, True])
def test_a_replayed_look_alike_takes_the_python_hits_path(
    locked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_compiled_hit()
    compiled = _outcomes("compiled", locked, monkeypatch)
    python = _outcomes("python", locked, monkeypatch)
    assert compiled == python
    names = [name for name, _ in LOOKALIKES]
    found = dict(zip(names, python, strict=True))
    assert found["dtype object equal to the name"][0] == "DTypeError"
    for name in names[1:]:  # valid look-alikes: the remembered request's views
        assert found[name] == found["the remembered request"] or found[name][0] == "SpecError"


def test_the_layout_memo_does_not_lay_out_a_look_alike_as_the_name_it_equals() -> None:
    """``compute_layout`` after ``"float32"`` was laid out: an object equal to it (and
    hashing like it) is refused as a fresh one is, not laid out as float32."""
    from arena.base.layout import compute_layout
    from arena.errors import DTypeError

    assert compute_layout((((64,), F32),)).total == 256
    with pytest.raises(DTypeError, match="unknown dtype"):
        compute_layout((((64,), _LooksLikeFloat32()),))
    assert compute_layout((((64,), np.dtype(F32)),)).total == 256  # a real dtype of its own
