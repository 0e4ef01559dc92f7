"""The int rules (issue 27 item 6): written once, in :mod:`arena.base.layout`
(``exact_int``, ``exact_dims``, ``exact_dim_source``, ``int_not_bool``, ``bool_like``; the
compiled mirror is ``digest_of`` in ``_hit.c``), and applied the same way by every entry point that
takes a shape, on both hit paths."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arena import Arena, SpecError
from arena.base.layout import (
    bool_like,
    check_dim,
    exact_dim_source,
    exact_dims,
    exact_int,
    int_not_bool,
)

ROOT = Path(__file__).resolve().parents[2]
HELPER = "arena/base/layout.py"
# Bool tests that are NOT the rules, on purpose: routing them through ``bool_like`` would
# change an error message (behaviour issue 27 keeps). The resolver's answer: a NumPy 2
# bool (class name ``bool``) is refused today as "not an integer", not as a bool.
# (Likewise ``plan_offsets``' block fields in arena/planning/offsets.py, whose
# ``isinstance(value, (bool, np.bool_))`` this scan does not match: a bool array or tensor
# is refused there by ``operator.index``'s message, not as a bool.)
KNOWN_OTHERS = {
    ("arena/slots/selector.py", "_resolved", "bool-like test of value"),
}
_SOURCE_TEXT = re.compile(r"__class__ is (not )?int\b|type\([^)]*\) is (not )?int\b")
_DIM_NAME = re.compile(r"^(dim|dims|d|d\d.*|dim_.*|.*_dim)$")


def _sources() -> Iterator[Path]:
    for folder in ("arena", "adapters"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _subject(node: ast.expr) -> str | None:
    """``x`` of ``x.__class__`` or ``type(x)``, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "__class__":
        return ast.unparse(node.value)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
    ):
        return ast.unparse(node.args[0])
    return None


def _isinstance_subjects(node: ast.AST, name: str) -> set[str]:
    """Subjects ``x`` of ``isinstance(x, name)`` or ``isinstance(x, (..., name, ...))``
    anywhere under ``node``."""
    subjects = set()
    for call in ast.walk(node):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "isinstance"
            and len(call.args) == 2
        ):
            kinds = call.args[1]
            names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            if any(isinstance(n, ast.Name) and n.id == name for n in names):
                subjects.add(ast.unparse(call.args[0]))
    return subjects


def _writings(path: Path) -> list[tuple[str, str, str]]:
    """Every place in ``path`` that writes the exact-int test, or refuses a bool for a
    dimension: ``(file, enclosing function, subject)``."""
    relative = path.relative_to(ROOT).as_posix()
    found: list[tuple[str, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Compare):
            subject = _subject(node.left)
            for op, right in zip(node.ops, node.comparators, strict=True):
                if (
                    subject is not None
                    and isinstance(op, (ast.Is, ast.IsNot))
                    and isinstance(right, ast.Name)
                    and right.id == "int"
                ):
                    found.append((relative, function, subject))
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _SOURCE_TEXT.search(node.value)
        ):
            found.append((relative, function, "source text"))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and _DIM_NAME.match(node.args[0].id)
            and "bool" in ast.unparse(node.args[1])
        ):
            found.append((relative, function, f"bool test of {node.args[0].id}"))
        if isinstance(node, ast.BoolOp):
            bools = _isinstance_subjects(node, "bool")
            ints = _isinstance_subjects(node, "int")
            found.extend((relative, function, f"int-not-bool test of {x}") for x in bools & ints)
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "__name__"
            and any(
                isinstance(c, ast.Constant) and c.value in ("bool", "bool_")
                for c in node.comparators
            )
        ) or (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "__name__"
            and any(
                isinstance(c, ast.Tuple)
                and any(isinstance(e, ast.Constant) and e.value == "bool_" for e in c.elts)
                for c in node.comparators
            )
        ):
            subject = ast.unparse(node.left.value)
            found.append((relative, function, f"bool-like test of {subject[5:-1]}"))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_the_int_rules_are_written_only_in_their_helper() -> None:
    strays = []
    in_helper = set()
    for path in _sources():
        for where in _writings(path):
            file, function, _ = where
            if file == HELPER:
                in_helper.add(function)
            elif where not in KNOWN_OTHERS:
                strays.append(where)
    assert not strays, (
        f"an int rule written outside {HELPER} (use exact_int, exact_dims, "
        f"exact_dim_source, int_not_bool or bool_like): {strays}"
    )
    # The scan sees the helper itself, so it can fail.
    assert in_helper == {"exact_int", "exact_dims", "exact_dim_source", "int_not_bool", "bool_like"}


def test_the_scan_finds_a_rule_written_again(tmp_path: Path) -> None:
    """The scan is not blind: each way of writing the rule is found."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(dim, shape):\n"
        "    if dim.__class__ is not int or type(shape[0]) is int:\n"
        "        return isinstance(dim, bool)\n"
        "    if isinstance(n, bool) or not isinstance(n, int) or type(n).__name__ == 'bool_':\n"
        "        return None\n"
        "    return 'd0.__class__ is not int'\n",
        encoding="utf-8",
    )
    global ROOT
    saved = ROOT
    ROOT = tmp_path
    try:
        found = _writings(planted)
    finally:
        ROOT = saved
    assert [subject for _, _, subject in found] == [
        "dim",
        "shape[0]",
        "bool test of dim",
        "int-not-bool test of n",
        "bool-like test of n",
        "source text",
    ]


def test_the_helper_itself() -> None:
    assert exact_dims((0, 1, 2**62)) and exact_dims(()) and exact_dims([3])
    for odd in (True, 2.0, np.int64(2), np.True_):
        assert not exact_dims((1, odd))
    test = exact_dim_source("d")
    assert eval(test, {}, {"d": 2}) is False  # the generated-code text
    assert eval(test, {}, {"d": True}) is True
    assert check_dim(0, 0, np.int64(5)) == 5 and check_dim(0, 0, 7).__class__ is int
    assert exact_int(3) and not exact_int(True) and not exact_int(np.int64(3))
    assert int_not_bool(3) and int_not_bool(np.int64(3)) is False and not int_not_bool(True)
    assert bool_like(True) and bool_like(np.True_) and bool_like(np.array([True]))
    assert not bool_like(1) and not bool_like(np.array([1]))


def _odd_dims() -> list[Any]:
    odd: list[Any] = [True, 2.0, np.True_, np.array([2])]
    torch = pytest.importorskip("torch")
    odd += [torch.tensor([2]), torch.tensor(True)]
    return odd


_ODD_IDS = ["True", "2.0", "numpy-bool", "numpy-one-element", "torch-one-element", "torch-bool"]


def _entry_points(a: Arena, framework: str) -> dict[str, Callable[[Any], Any]]:
    front = a.front(framework)

    def scoped(spec: Any) -> Any:
        with front.scope() as scope:
            return scope.get_simultaneous(spec)

    def stepped(spec: Any) -> Any:
        with front.step("exact-int") as step:
            return step.get_simultaneous(spec)

    return {
        "get_simultaneous": front.get_simultaneous,
        "try_get_simultaneous": front.try_get_simultaneous,
        "arena.get_simultaneous": a.get_simultaneous,
        "scope": scoped,
        "step": stepped,
        "reserve": a.reserve,
        "get_persistent": lambda spec: front.get_persistent("exact-int", spec[0], spec[1]),
    }


@pytest.mark.parametrize("remembered", [False, True], ids=["cold", "remembered"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("index", range(len(_ODD_IDS)), ids=_ODD_IDS)
def test_every_entry_point_refuses_an_odd_dimension_the_same_way(
    hit_path: str, framework: str, remembered: bool, index: int
) -> None:
    """True, 2.0, a NumPy bool and one-element arrays and tensors (some hash and compare
    like a remembered ``(2, 3)``): the same SpecError, word for word, from every entry
    point, cold or after the plain request was remembered, on either hit path."""
    pytest.importorskip(framework)
    dim = _odd_dims()[index]
    with pytest.raises(SpecError) as expected:
        check_dim(0, 0, dim)
    with Arena("cpu", framework="numpy") as a:
        for name, call in _entry_points(a, framework).items():
            if remembered:
                call(((2, 3), "float32"))
                call(((2, 3), "float32"))
            with pytest.raises(SpecError) as raised:
                call(((dim, 3), "float32"))
            assert type(raised.value) is type(expected.value), name
            assert str(raised.value) == str(expected.value), name
