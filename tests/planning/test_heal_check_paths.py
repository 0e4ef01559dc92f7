"""The compiled scope enter's heal check (``regions_held`` in ``arena/planning/_region_hit.c``)
against the Python one (``arena.slots.regions.heal_regions``): both count a region's
references from the stack as its entries and the steps whose ``nested`` it is. Only a
step is ever a ``nested`` (``RegionStack.step_below`` returns steps alone), so a scope is
referred to by its entries only, on both paths; a step below a scope is still a step's
``nested`` across it. For stacks of scopes and steps with some dropped by their owner
(an interrupt's orphans) the compiled enter hands over to Python exactly when Python
heals something, and both leave the same slot."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from arena import Arena
from arena.planning.scopes import Scope
from arena.slots.regions import _ORPHANED
from arena.views import hit
from tests.conftest import need_compiled_hit

F32 = "float32"

#: Stacks, innermost last: "s"/"t" a scope/step its owner holds, "S"/"T" one dropped.
STACKS = [
    "s",
    "S",
    "t",
    "T",
    "tt",
    "Tt",  # the outer step referred to by the inner one's ``nested`` alone
    "tT",
    "TT",
    "tst",  # the outer step is the inner one's ``nested`` across the scope
    "Tst",
    "tSt",
    "sT",
    "Ss",
    "sTs",
    "TsT",
]


def _build(ws: Arena, stack: str) -> list[Any]:
    """Open ``stack``'s regions, all held while they open (an enter heals what is dropped
    below it), then drop the upper-case ones; the held ones are returned."""
    opened = []
    for i, kind in enumerate(stack):
        region = ws.scope() if kind in "sS" else ws.step(f"k{i}")
        region.__enter__()
        region.get_simultaneous(((16 * (i + 1),), F32))
        opened.append(region)
    del region
    return [region for region, kind in zip(opened, stack, strict=True) if kind in "st"]


def _state(slot: Any) -> Any:
    return (
        slot.stack.top,
        slot.stack.live,
        [
            (type(r).__name__.replace("Compiled", ""), getattr(r, "key", None))
            for r in slot.stack.regions
        ],
    )


def _run(path: str, stack: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    monkeypatch.setattr(hit, "HIT_PATH", path)
    taken = [0]
    enter_on = Scope._enter_on

    def counted(self: Scope[Any], slot: Any) -> Any:
        taken[0] += 1
        return enter_on(self, slot)

    monkeypatch.setattr(Scope, "_enter_on", counted)
    ws = Arena("cpu", framework="numpy")
    slot = ws.numpy._select()
    held = _build(ws, stack)
    gc.collect()
    before = _state(slot)
    taken[0] = 0  # the new scope's enter alone
    scope = ws.scope()
    scope.__enter__()
    entered = _state(slot)
    scope.__exit__(None, None, None)
    out = (before, entered, _state(slot))
    for region in reversed(held):
        region.__exit__(None, None, None)
    after = _state(slot)
    ws.close()
    monkeypatch.undo()
    return (out, after), taken[0]


@pytest.mark.skipif(_ORPHANED is None, reason="healing reads CPython's reference counts")
@pytest.mark.parametrize("stack", STACKS)
def test_the_compiled_heal_check_agrees_with_the_python_one(
    stack: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_compiled_hit()
    compiled, handed = _run("compiled", stack, monkeypatch)
    python, python_taken = _run("python", stack, monkeypatch)
    assert compiled == python
    assert python_taken == 1  # every Python enter goes through _enter_on
    (before, entered, _), _ = python
    healed = len(entered[2]) != len(before[2]) + 1
    assert healed == any(kind in "ST" for kind in stack)  # every orphan is found
    # The compiled enter handed the enter to Python exactly where Python healed.
    assert handed == int(healed)
