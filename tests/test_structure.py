"""The house: no import cycle between arena's modules (imports under TYPE_CHECKING and
inside functions included), no module importing another's underscore names, and every
package directory installed. There is no line cap: a module is one idea, split by idea,
never trimmed to fit a count (issue 27)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for arena/ and adapters/ (installed as arena.adapters)."""
    found: dict[str, Path] = {}
    for base, package in ((ROOT / "arena", "arena"), (ROOT / "adapters", "arena.adapters")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every arena module ``path`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in known and t != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of module imports, or None (packages importing their own submodules for
    re-export are edges too)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            # A package's __init__ runs before its submodules; a submodule importing
            # siblings through the package is the normal way, not a cycle.
            if node.startswith(target + "."):
                continue
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = _graph()
    graph["arena.slots.governor"] = graph["arena.slots.governor"] | {"arena.slots.slot"}
    assert _cycle(graph) is not None


def test_no_module_imports_another_modules_underscore_names() -> None:
    known = set(_modules())
    offenders = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in known and node.module != name:
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private and private != ["__version__"]:
                    offenders.append(f"{name}: from {node.module} import {private}")
    assert offenders == []


def test_every_package_directory_is_installed() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert packages == listed


def test_test_folders_mirror_the_package() -> None:
    """Issue 27 item 7: each folder of tests/ tests the part of the package of the same
    name (arena/<part>/ or adapters/), and each holds test files (none is a stray)."""
    folders = sorted(
        p
        for p in (ROOT / "tests").iterdir()
        if p.is_dir() and "__" not in p.name and not p.name.startswith(".")
    )
    assert folders, "tests/ has no folders: the tests no longer mirror the package"
    parts = {p.name for p in (ROOT / "arena").iterdir() if (p / "__init__.py").is_file()}
    parts.add("adapters")
    strays = [f.name for f in folders if f.name not in parts]
    assert not strays, f"tests/ folders that name no part of the package: {strays}"
    empty = [f.name for f in folders if not list(f.glob("test_*.py"))]
    assert not empty, f"tests/ folders without a test file: {empty}"
    uninstalled = [f.name for f in folders if not (f / "__init__.py").is_file()]
    assert not uninstalled, f"tests/ folders without __init__.py (name clashes): {uninstalled}"
