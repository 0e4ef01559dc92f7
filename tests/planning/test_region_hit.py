"""The compiled step and scope hits are the planning layer's (issue 27 item 1): the
extension ``arena.planning._region_hit`` (``arena/planning/_region_hit.c``) holds
``StepHitBase`` and ``ScopeHitBase``, and asks the views layer's compiled hit through the
C-API it exports (``arena/views/_hit_api.h``, the capsule ``arena.views._hit._C_API``);
``arena.views._hit`` holds nothing of steps and scopes. Where the extension is missing, or
``ARENA_PURE_PYTHON=1``, steps and scopes run their pure-Python twins (the plain hit may
still be compiled). tests/test_layers.py holds that no C module names a higher layer's
fields; the step and scope hit tests compare what the compiled hits do with Python's."""

from __future__ import annotations

import subprocess
import sys

from arena import Arena
from arena.planning import region_hit, scopes, steps
from arena.views import hit
from tests.conftest import check_pure_python_switch, need_compiled_hit


def test_the_views_layer_exports_its_c_api_and_no_region_hit() -> None:
    need_compiled_hit()
    views = hit.compiled
    assert views is not None
    assert type(views._C_API).__name__ == "PyCapsule"
    assert repr(views._C_API).startswith('<capsule object "arena.views._hit._C_API"')
    names = {n for n in vars(views) if not n.startswith("__")}
    assert names == {"Binding", "HitBase", "Planner", "_C_API", "bind"}


def test_the_step_and_scope_hits_are_the_planning_layer_s() -> None:
    need_compiled_hit()
    module = region_hit.compiled
    assert module is not None and module.__name__ == "arena.planning._region_hit"
    for base in (module.StepHitBase, module.ScopeHitBase):
        assert base.__module__ == "arena.planning._region_hit"
    assert region_hit.StepHitBase is module.StepHitBase
    assert region_hit.ScopeHitBase is module.ScopeHitBase
    assert issubclass(steps.step_class(), module.StepHitBase)
    assert issubclass(scopes.scope_class(), module.ScopeHitBase)


def test_without_the_region_hit_steps_and_scopes_run_in_python() -> None:
    """A build whose ``arena.planning._region_hit`` does not import (stood in for by a
    blocked import): the plain hit stays compiled, steps and scopes run their Python twins
    and serve the same counts."""
    need_compiled_hit()
    code = (
        "import sys\n"
        "sys.modules['arena.planning._region_hit'] = None\n"
        "from arena import Arena\n"
        "from arena.planning import region_hit, scopes, steps\n"
        "from arena.views import hit\n"
        "spec = ((4, 4), 'float32')\n"
        "with Arena('cpu', framework='numpy') as ws:\n"
        "    for index in range(5):\n"
        "        if index == 3:\n"
        "            ws.lock()\n"
        "        with ws.numpy.step('k') as st:\n"
        "            st.get_simultaneous(spec)\n"
        "        with ws.numpy.scope() as sc:\n"
        "            sc.get_simultaneous(spec)\n"
        "        ws.numpy.get_simultaneous(spec)\n"
        "    calls = ws.stats().slots[0].calls\n"
        "print(hit.HIT_PATH, region_hit.compiled, steps.step_class().__name__,\n"
        "      scopes.scope_class().__name__, calls)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["compiled", "None", "Step", "Scope", "15"]


def test_arena_pure_python_runs_the_python_region_hits() -> None:
    code = (
        "from arena.planning import region_hit; "
        "print(region_hit.compiled is None, region_hit.WHY_PYTHON or '-')"
    )
    check_pure_python_switch(code, "arena.planning._region_hit", compiled="False", python="True")


def test_a_locked_replays_served_request_outlives_a_sweep_of_its_cache(hit_path: str) -> None:
    # planted49: the compiled step hit (step_serve) without its arena_hit_mark_used: a
    # request it served was not marked used, so the next sweep of the request index's
    # bounded memory dropped it like one never served again (its next replay built new
    # views). Only a locked replay is served compiled (unlocked, the request log's
    # bookkeeping takes the Python hit), so tests/planning/test_planning_gaps9.py's
    # unlocked test of the same sweep passed, and so did all of tests/planning and
    # tests/views.
    spec = ((256,), "float32")
    with Arena("cpu", framework="numpy", cached_views=True, max_cached_layouts=8) as ws:

        def one(request: tuple[tuple[int, ...], str]) -> object:
            with ws.step("k") as st:
                return st.get_simultaneous(request)[0]

        one(spec)
        planned = one(spec)  # record, then plan (remembered)
        ws.lock()
        assert one(spec) is planned  # the locked replay's hit
        for n in range(1, 9):  # smaller views the plan fits: the 8th insert sweeps
            one(((n,), "float32"))
        assert one(spec) is planned, hit_path
