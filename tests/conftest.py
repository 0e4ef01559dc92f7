"""Shared fixtures and the ``gpu`` policy.

``gpu`` tests are skipped where no framework sees a CUDA device. With
``ARENA_REQUIRE_GPU=1`` (the GPU check) a run cannot pass by skipping: a ``gpu`` test
without a device fails, and so does every other skip (a module-level ``importorskip``, an
adapter that cannot load, a missing framework) unless its reason contains one of
:data:`ALLOWED_GPU_SKIPS`, each listed with why it is not a gap.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

import arena
from arena.environment import flag_from_env
from arena.memory.devices import cuda_device_count, cuda_unavailable_reason

#: Read as every ARENA_* flag is (1/true/yes/on, any case; a ConfigError for anything
#: else), so that "true" or "1 " does not turn the GPU policy off by accident.
REQUIRE_GPU = flag_from_env("ARENA_REQUIRE_GPU")
#: CI sets it where a C compiler is present: the compiled hit path must be built and tested.
REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")

#: Skip reasons a GPU run accepts (a reason containing one of these), and why each is no gap.
ALLOWED_GPU_SKIPS = {
    "a GPU is visible": "a check of the no-GPU messages, which only a machine without one can run",
    "needs two CUDA devices": "tells the arena's device from the current one: one GPU cannot",
    "has no example runnable here": "a document without Python examples",
    "x64 is enabled in this process": "a JAX default checked only while x64 is off",
    "the compiled hit path is not in use here": "a machine without a C compiler or Python's "
    "headers installs the pure-Python hit path; the compiled one is tested where it is built",
    "a CUDA device is usable here": "a check of the no-GPU messages (bench and demo flags)",
    "a CUDA device is visible": "a check of the no-GPU message of pinned memory",
    "needs a machine without CuPy and without a CUDA device": "a check of the no-GPU messages",
    "a check of the host default; CuPy is installed here": "the host default without CuPy, "
    "which CI's CPU runs check; a GPU machine has CuPy",
    "counts the failed mmap calls with strace": "host memory only, run where strace is "
    "installed (CI's machine); GPU machines may lack it",
    "elsewhere than CPython only": "a check for other interpreters; the GPU run is CPython",
    "the Python hit path serves every request through the Python path": "the compiled path's "
    "half of a test parametrised over both paths; its pure-Python half has nothing to check",
    "CPython 3.12 on has no dict version tags: the compiled step rows and the step and scope "
    "memos are compiled out": "they tell an unchanged dict by its tag; without them the compiled "
    "hits read the dicts every time, which the hit-path tests run (tests/extensions.py)",
}


def _allowed(reason: str) -> bool:
    return any(listed in reason for listed in ALLOWED_GPU_SKIPS)


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _refuse_skip(report: Any) -> None:
    reason = _skip_reason(report)
    if hasattr(report, "wasxfail") or _allowed(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"ARENA_REQUIRE_GPU=1 but this was skipped: {reason!r}. A GPU run may skip only "
        f"for the reasons in tests/conftest.py ALLOWED_GPU_SKIPS; install what is missing, "
        "or list the reason there with why it is no gap"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_GPU and report.skipped:
        _refuse_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_GPU and report.skipped:  # a module-level importorskip
        _refuse_skip(report)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REQUIRE_GPU or cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device ({cuda_unavailable_reason()})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if REQUIRE_GPU and "gpu" in item.keywords and cuda_device_count() == 0:
        pytest.fail(
            f"ARENA_REQUIRE_GPU=1 but no CUDA device is usable: {cuda_unavailable_reason()}"
        )


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    yield
    arena.reset_arena(all_devices=True)


@pytest.fixture
def host() -> Iterator[arena.Arena]:
    with arena.Arena("cpu", framework="numpy") as a:
        yield a


@pytest.fixture(params=["python", "compiled"])
def hit_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per hit path: every front made in it uses that path.

    ``compiled`` skips where the extension is not in use (not built, or
    ``ARENA_PURE_PYTHON=1``), and fails instead under ``ARENA_REQUIRE_COMPILED=1``.
    """
    from arena.views import hit

    path: str = request.param
    if path == "compiled":
        need_compiled_hit()
    monkeypatch.setattr(hit, "HIT_PATH", path)
    return path


def need_compiled_hit() -> None:
    """Skip the calling test where the compiled hit path is not in use (not built, or
    ``ARENA_PURE_PYTHON=1``): the plain hit's (``arena.views._hit``) and the step's and
    scope's (``arena.planning._region_hit``); fail it instead under
    ``ARENA_REQUIRE_COMPILED=1``."""
    from arena.planning import region_hit
    from arena.views import hit

    if hit.compiled is None or region_hit.compiled is None:
        reason = "the compiled hit path is not in use here (not built, or ARENA_PURE_PYTHON=1)"
        if REQUIRE_COMPILED:
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)


def check_pure_python_switch(code: str, extension: str, compiled: str, python: str) -> None:
    """Run ``code`` (which prints the path in use, then why Python runs) in a fresh
    interpreter with ``ARENA_PURE_PYTHON=1`` and without it: set, the Python twin runs and
    says so (``python``); unset, ``extension`` runs wherever it was built (``compiled``),
    and must have been built under ``ARENA_REQUIRE_COMPILED=1``."""
    import importlib.util
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ARENA_PURE_PYTHON"}
    pure = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "ARENA_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert pure.stdout.split(maxsplit=1) == [python, "ARENA_PURE_PYTHON is set\n"]
    default = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    built = importlib.util.find_spec(extension) is not None
    assert default.stdout.split()[0] == (compiled if built else python)
    if REQUIRE_COMPILED:
        assert built, f"ARENA_REQUIRE_COMPILED=1 but {extension} is not built"
