"""The Python examples in README.md and docs/ run as written; the docs site is consistent.

Blocks fenced as ```python run, in order, one interpreter per file. Blocks titled
``needs a CUDA device`` (```python title="needs a CUDA device") run only where one is
usable. A file whose examples
import a framework that is not installed is skipped with that reason (the ``test`` extra
installs torch and JAX, so none is skipped there).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from arena.adapters import ADAPTER_NAMES

import arena
from arena.memory.devices import cuda_device_count

ROOT = Path(__file__).resolve().parent.parent
#: A Python example; titled "needs a CUDA device..." it runs only where one is usable (the
#: title shows on the site, where a bare marker such as "python gpu" garbles the page).
FENCE = re.compile(r'^```python( title="needs a CUDA device[^"]*")?\n(.*?)^```', re.S | re.M)
#: Every fence's info string: what the site renders as code (anything else garbles it).
INFO = re.compile(r"^```(.*)$", re.M)
RENDERED = re.compile(r'(python|bash|text|json|toml|yaml|console)?( title="[^"]+")?')
#: Pages with Python examples (pages with none have nothing to run, hence no test).
PAGES = sorted((ROOT / "docs").rglob("*.md"))  # the guides, docs/index.md and docs/api/
FILES = [p for p in [ROOT / "README.md", *PAGES] if FENCE.search(p.read_text())]


IMPORT = re.compile(r"^\s*(?:import|from)\s+(torch|jax|cupy|ml_dtypes)\b", re.M)


def _blocks(path: Path) -> list[str]:
    gpu = cuda_device_count() > 0
    return [code for marker, code in FENCE.findall(path.read_text()) if gpu or not marker]


def _missing_frameworks(code: str) -> list[str]:
    """Frameworks the examples import that are not installed here."""
    return sorted({n for n in IMPORT.findall(code) if importlib.util.find_spec(n) is None})


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_examples_run(path: Path, tmp_path: Path) -> None:
    blocks = _blocks(path)
    if not blocks:
        pytest.skip(f"{path.name}'s examples need a CUDA device (none is usable here)")
    missing = _missing_frameworks("\n".join(blocks))
    if missing:
        pytest.skip(f"{path.name}'s examples need {', '.join(missing)}, not installed here")
    script = tmp_path / f"{path.stem}_examples.py"
    script.write_text("\n\n".join(blocks))
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{path.name} examples failed:\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("path", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_fence_is_one_the_site_renders(path: Path) -> None:
    bad = [info for info in INFO.findall(path.read_text()) if not RENDERED.fullmatch(info)]
    assert bad == [], f"{path.name}: fences the docs site garbles: {bad}"


def test_every_doc_is_covered() -> None:
    python_blocks = sum(len(FENCE.findall(p.read_text())) for p in FILES)
    assert python_blocks >= 10


def test_bench_tables_match_the_bench_json() -> None:
    """README.md's and docs/performance.md's bench tables are what the JSON renders to."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render-bench"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


API_DIRECTIVE = re.compile(r"^::: (\S+)", re.M)


def test_api_pages_name_only_public_objects() -> None:
    """``::: name`` directives name what ``arena`` exports or an ``arena.adapters`` module.

    Internal module paths would break when modules move; public names stay.
    """
    public = {f"arena.{name}" for name in arena.__all__}
    public |= {"arena.adapters", "arena.adapters.base"}
    # Public modules the guides import from: the vLLM drop-in and the report's functions.
    public |= {
        "arena.compat.vllm",
        "arena.observe.report.analyse",
        "arena.observe.report.format_analysis",
    }
    public |= {f"arena.adapters.{name}" for name in ADAPTER_NAMES}
    named = {
        (page.name, name)
        for page in (ROOT / "docs" / "api").glob("*.md")
        for name in API_DIRECTIVE.findall(page.read_text())
    }
    assert len(named) >= 40
    assert [(page, name) for page, name in sorted(named) if name not in public] == []
    documented = {name for _, name in named}
    missing = sorted(
        public
        - documented
        - {"arena.__version__"}
        - {f"arena.adapters.{name}" for name in ADAPTER_NAMES if name != "numpy"}
    )
    assert missing == [], f"public names without an API entry: {missing}"


def test_every_page_is_in_the_site_navigation() -> None:
    nav = set(
        re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    )
    pages = {str(p.relative_to(ROOT / "docs")) for p in PAGES}
    assert pages == nav


#: A name the docs or a docstring place in a C file: a backquoted name, " in ", a backquoted
#: C file of the package (``_hit.c``, ``arena/memory/_host.c``).
C_NAME = re.compile(r"``?([A-Za-z_][\w.]*)``? in ``?((?:arena/)?(?:\w+/)?_\w+\.c)``?")


def test_names_placed_in_a_c_file_are_there() -> None:
    """Every name the docs, README or a docstring or comment place "in `_hit.c`" (or
    another of the C extensions) is spelled in that file (four places named
    ``plain_digest``, a name ``_hit.c`` never had: its exact-int check is ``digest_of``)."""
    sources = {p.name: p.read_text() for p in (ROOT / "arena").rglob("_*.c")}
    texts = [ROOT / "README.md", *PAGES]
    for folder in ("arena", "adapters", "tests", "scripts"):
        texts += sorted((ROOT / folder).rglob("*.py"))
    found = [
        (str(path.relative_to(ROOT)), name, file)
        for path in texts
        for name, file in C_NAME.findall(path.read_text())
    ]
    assert len(found) >= 5
    stale = [
        (where, name, file)
        for where, name, file in found
        if Path(file).name not in sources
        or any(
            re.search(rf"\b{part}\b", sources[Path(file).name]) is None for part in name.split(".")
        )
    ]
    assert stale == [], f"names not found in the C file they are placed in: {stale}"


def test_the_mutation_sample_counts_without_a_size_or_seed() -> None:
    """``scripts/mutation-sample GROUP MODULE --count`` (docs/testing.md's draw) asks for
    no sample size or seed; a draw without them says which are required."""
    script = str(ROOT / "scripts" / "mutation-sample")
    for args, said in (
        (["nogroup", "arena/none.py", "--count"], "unknown group 'nogroup'; choose one of slots,"),
        (["planning", "arena/none.py", "--count"], "'arena/none.py' is not mutated in group"),
        (["planning", "arena/planning/steps.py", "--count", "--size"], "expected one argument"),
        (["planning", "arena/planning/steps.py"], "--size and --seed are required to draw"),
        (["planning", "arena/planning/steps.py", "--size", "3"], "--size and --seed are"),
    ):
        done = subprocess.run(
            [sys.executable, script, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)


def test_the_mutation_sample_enlarges_a_draw_only_with_names_it_left_out() -> None:
    """``--exclude`` (docs/testing.md, enlarging a sample): the names of an earlier draw are
    left out before the new one, and a draw naming mutants the module no longer has is
    refused (the module changed: the old sample is stale)."""
    module = _script_module("mutation-sample")
    names = [f"m__mutmut_{i}" for i in range(1, 8)]
    assert module.left_out(names, ["m__mutmut_2", "m__mutmut_5"]) == [
        "m__mutmut_1",
        "m__mutmut_3",
        "m__mutmut_4",
        "m__mutmut_6",
        "m__mutmut_7",
    ]
    assert module.left_out(names, []) == names
    with pytest.raises(ValueError, match=r"1 of the names drawn before .*'gone__mutmut_1'"):
        module.left_out(names, ["m__mutmut_1", "gone__mutmut_1"])


def _script_module(name: str) -> Any:
    """``scripts/NAME`` (a script without ``.py``) loaded as a module."""
    loader = importlib.machinery.SourceFileLoader(f"_{name}", str(ROOT / "scripts" / name))
    spec = importlib.util.spec_from_loader(f"_{name}", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    loader.exec_module(module)
    return module


def _wilson_low(killed: int, total: int) -> float:
    """The lower end of the Wilson 95 % interval of ``killed`` of ``total``."""
    z2 = 1.96**2
    share = killed / total
    centre = share + z2 / (2 * total)
    half = 1.96 * (share * (1 - share) / total + z2 / (4 * total * total)) ** 0.5
    return (centre - half) / (1 + z2 / total)


def test_the_mutation_standing_lists_every_mutated_module_with_its_own_arithmetic() -> None:
    """docs/testing.md "Where every module stands": one row per module any group of
    ``scripts/mutation`` mutates, none else; each row's score and interval follow from its
    counts (a whole module's score is exact, a sample's lower end is Wilson's)."""
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    section = text.split("### Where every module stands", 1)[1].split("\n### ", 1)[0]
    row = re.compile(
        r"^\| `(?P<module>[^`]+)` \| (?P<group>[a-z]+) \| [^|]+ \| `[0-9a-f]{7}` \| "
        r"(?P<drawn>all \d+|\d+ of \d+) \| (?P<killed>\d+) of (?P<total>\d+) \| "
        r"(?P<score>[\d.]+) % \| (?P<low>exact \(all run\)|[\d.]+ %) \|$",
        re.MULTILINE,
    )
    rows = [match.groupdict() for match in row.finditer(section)]
    groups = _script_module("mutation").GROUPS
    mutated = {module: set() for group in groups.values() for module in group.modules}
    for name, group in groups.items():
        for module in group.modules:
            mutated[module].add(name)
    assert sorted(r["module"] for r in rows) == sorted(mutated)
    for r in rows:
        killed, total = int(r["killed"]), int(r["total"])
        assert r["group"] in mutated[r["module"]], r
        assert total > 0 and killed <= total, r
        assert r["score"] == f"{100 * killed / total:.1f}", r
        if r["drawn"].startswith("all"):
            assert total <= int(r["drawn"].split()[1]), r
            assert r["low"] == "exact (all run)", r
        else:
            drawn, mutants = map(int, r["drawn"].split(" of "))
            assert total <= drawn <= mutants, r
            assert r["low"] == f"{100 * _wilson_low(killed, total):.1f} %", r
