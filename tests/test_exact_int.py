"""The exact-int rule for dimensions (issue 27 item 6): written once, in
:mod:`arena.views.layout` (``exact_dims``, ``exact_dim_source``, ``check_dim``,
``int_not_bool``), and
applied the same way by every entry point that takes a shape, on both hit paths."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arena import Arena, SpecError
from arena.views.layout import check_dim, exact_dim_source, exact_dims

ROOT = Path(__file__).resolve().parent.parent
HELPER = (
    "arena/views/layout.py",
    {"exact_dims", "exact_dim_source", "check_dim", "int_not_bool"},
)
# The same test applied to values that are not dimensions: a resolver's micro-batch or
# lane answer, a sleep level, a Triton size, alignment or stream handle. Each sits in front
# of its own validator with its own message; they are listed here so that a NEW exact-int
# test anywhere (a dimension check written again) fails this file.
NOT_DIMENSIONS = {
    ("arena/slots/selector.py", "_select", "ubatch"),
    ("arena/slots/selector.py", "_select", "lane"),
    ("arena/slots/selector.py", "select_in_lane", "ubatch"),
    ("arena/slots/sleep.py", "check_level", "level"),
    ("arena/kernels/triton.py", "__call__", "size"),
    ("arena/kernels/triton.py", "__call__", "alignment"),
    ("arena/kernels/triton.py", "__call__", "stream"),
    # A profile file's JSON schema: its dims are JSON numbers, where true and 1.0 are the
    # values to refuse; the schema module stays free of the package's layers.
    ("arena/observe/profileschema.py", "_check_views", "bool test of d"),
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
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_the_exact_int_rule_is_written_only_in_its_helper() -> None:
    helper_file, helper_functions = HELPER
    strays = []
    in_helper = set()
    for path in _sources():
        for where in _writings(path):
            file, function, _ = where
            if file == helper_file and function in helper_functions:
                in_helper.add(function)
            elif where not in NOT_DIMENSIONS:
                strays.append(where)
    assert not strays, (
        f"the exact-int rule written outside {helper_file} (use exact_dims, "
        f"exact_dim_source or check_dim): {strays}"
    )
    assert in_helper == helper_functions  # the scan sees the helper itself: it can fail


def test_the_scan_finds_a_rule_written_again(tmp_path: Path) -> None:
    """The scan is not blind: each way of writing the rule is found."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(dim, shape):\n"
        "    if dim.__class__ is not int or type(shape[0]) is int:\n"
        "        return isinstance(dim, bool)\n"
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
