"""Profiles and event logs on awkward paths: special files, symlinks, lock files, and
counters at the schema's limits.

Anything that could hang (a FIFO, ``/dev/zero``) runs in a child process with a timeout
and an address-space limit, so a regression fails here instead of hanging or exhausting
the machine. Children also refuse to replace anything under ``/dev``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import arena
from arena.observe import profilefile
from arena.observe.profilefile import (
    LIMIT,
    MAX_PROFILE_BYTES,
    ProfileError,
    check_profile,
    merge_profiles,
    read_profile,
)
from tests.interrupts import Injector

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX files only")

#: Prepended to every child: 1 GiB of address space, warnings shown, /dev never replaced.
PRELUDE = textwrap.dedent(
    """
    import os, resource, sys, tempfile, warnings
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    warnings.simplefilter("always")
    _replace = os.replace
    def _guarded(src, dst, *args, **kwargs):
        if os.path.realpath(dst).startswith("/dev/"):
            raise AssertionError(f"replaced {dst}")
        return _replace(src, dst, *args, **kwargs)
    os.replace = _guarded
    import arena
    """
)


def _child(
    code: str, *args: str, env: dict[str, str] | None = None, module: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (after :data:`PRELUDE`) in a child; a hang fails the test."""
    command = [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child hung: {exc}")


def _valid(ubatches: int = 1, runs: int = 1) -> dict[str, Any]:
    """A valid profile for a numpy cpu arena of ``ubatches`` micro-batches."""
    return {
        "format": "arena-profile",
        "version": 1,
        "device": "cpu",
        "ubatches": ubatches,
        "lanes": 1,
        "alignment": 256,
        "growth": "exact",
        "runs": runs,
        "ranks": [7],
        "slots": [
            {"ubatch": u, "lane": 0, "peak": 4096, "capacity": 4096, "growths": 1}
            for u in range(ubatches)
        ],
        "sites": [
            {
                "site": "old.py:1:history",
                "ubatch": 0,
                "lane": 0,
                "peak": 4096,
                "layouts": [{"total": 4096, "padding": 0, "views": [[[1024], "float32"]]}],
            }
        ],
        "timeline": [
            {
                "t": 0.5,
                "ubatch": 0,
                "lane": 0,
                "old": 0,
                "new": 4096,
                "caller": "old.py:1:history",
                "kind": "grow",
            }
        ],
    }


def _sites(path: Path) -> set[str]:
    return {s["site"] for s in read_profile(path)["sites"]}


# --------------------------------------------------------------- special files (item 4)
SPECIAL = ["fifo", "/dev/zero", "/dev/full", "/dev/null", "directory"]


def _special(tmp_path: Path, kind: str) -> str:
    if kind == "fifo":
        path = tmp_path / "p.json"
        os.mkfifo(path)
        return str(path)
    if kind == "directory":
        (tmp_path / "p.json").mkdir()
        return str(tmp_path / "p.json")
    return kind


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_special_file_as_profile_warns_and_the_arena_starts_unsized(
    tmp_path: Path, kind: str
) -> None:
    path = _special(tmp_path, kind)
    result = _child(
        """
        with warnings.catch_warnings(record=True) as caught:
            ws = arena.Arena("cpu", framework="numpy", profile=sys.argv[1])
            unsized = ws.stats().allocations == 0
            ws.get_simultaneous(((100,), "float32"))
            ws.lock()
            ws.close()
        for warning in caught:
            print(warning.category.__name__, warning.message)
        print("unsized", unsized)
        """,
        path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "unsized True"
    assert len(lines) == 2, lines  # warned once: at construction, not again at lock/close
    assert lines[0].startswith("ArenaWarning") and repr(path) in lines[0], lines
    assert "not a regular file" in lines[0] and "left as it is" in lines[0], lines
    mode = os.stat(path).st_mode
    expected = {"fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR}.get(kind, stat.S_ISCHR)
    assert expected(mode), f"{path} was replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        [] if kind.startswith("/dev") else ["p.json"]
    )


def test_arena_profile_naming_dev_zero_warns_under_an_address_space_limit() -> None:
    result = _child(
        """
        with warnings.catch_warnings(record=True) as caught:
            ws = arena.init_arena("cpu", framework="numpy")
            ws.get_simultaneous(((100,), "float32"))
            arena.lock_arena("cpu")
        print([str(w.message) for w in caught])
        """,
        env={"ARENA_PROFILE": "/dev/zero"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'/dev/zero'" in result.stdout and "a character device" in result.stdout


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_report_on_a_special_file_exits_2_with_one_line(tmp_path: Path, kind: str) -> None:
    path = _special(tmp_path, kind)
    result = _child(
        """
        import runpy
        sys.argv = ["arena", "report", sys.argv[1]]
        runpy.run_module("arena", run_name="__main__")
        """,
        path,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a regular file" in lines[0], lines


@pytest.mark.parametrize("kind", ["fifo", "/dev/null", "directory"])
def test_an_event_log_on_a_special_file_warns_and_the_arena_runs_without_it(
    tmp_path: Path, kind: str
) -> None:
    path = _special(tmp_path, kind) if kind != "/dev/null" else kind
    result = _child(
        """
        with warnings.catch_warnings(record=True) as caught:
            with arena.Arena("cpu", framework="numpy", event_log=sys.argv[1]) as ws:
                ws.get_simultaneous(((100,), "float32"))
                ws.get_simultaneous(((10000,), "float32"))
        for warning in caught:
            print(warning.category.__name__, warning.message)
        """,
        path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines  # once, not per event
    assert lines[0].startswith("ArenaWarning") and repr(path) in lines[0], lines
    assert "not a regular file" in lines[0], lines


def test_a_profile_larger_than_the_bound_is_refused_and_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MAX_PROFILE_BYTES == 64 << 20
    path = tmp_path / "p.json"
    text = json.dumps(_valid(), indent=1)
    path.write_text(text)
    monkeypatch.setattr(profilefile, "MAX_PROFILE_BYTES", len(text) - 1)
    with pytest.raises(ProfileError, match="MAX_PROFILE_BYTES"):
        read_profile(path)
    with pytest.warns(arena.ArenaWarning, match="MAX_PROFILE_BYTES"):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws:
        assert ws.stats().allocations == 0
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    assert path.read_text() == text


# --------------------------------------------------------------------- symlinks (item 5)
def test_a_symlinked_profile_stays_a_link_and_its_target_gets_the_run(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "p.json"
    target.write_text(json.dumps(_valid()))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with arena.Arena("cpu", framework="numpy", profile=link) as ws:
        assert ws.stats().allocations == 1  # presized through the link
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    assert link.is_symlink() and link.resolve() == target
    profile = read_profile(target)
    assert profile["runs"] == 2 and profile["ranks"] == [0, 7]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real"]
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["p.json"]


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "later.json")
    with arena.Arena("cpu", framework="numpy", profile=link) as ws:
        ws.get_simultaneous(((100,), "float32"))
    assert link.is_symlink() and read_profile(tmp_path / "later.json")["runs"] == 1


def test_a_writer_through_the_link_waits_for_a_writer_through_the_real_path(
    tmp_path: Path,
) -> None:
    fcntl = pytest.importorskip("fcntl")
    target = tmp_path / "p.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with arena.Arena("cpu", framework="numpy", profile=link) as ws:
        ws.get_simultaneous(((10,), "float32"))
        with open(tmp_path / "p.json.lock", "a+b") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a writer through the real path
            writer = threading.Thread(target=ws.save_profile)
            writer.start()
            writer.join(0.3)
            assert writer.is_alive() and not target.exists()
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        writer.join(10)
        assert not writer.is_alive() and read_profile(target)["runs"] == 1
    assert link.is_symlink()


WRITER = textwrap.dedent(
    """
    import os, sys, time
    import arena

    rank = int(os.environ["RANK"])
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # start together
    with arena.Arena("cpu", ubatches=4, framework="numpy", profile=sys.argv[1]) as ws:
        for step in range(1, 21):
            with ws.unlocked():
                with ws.ubatch(rank):  # each writer owns one slot
                    ws.get_simultaneous(((step * 256 * (rank + 1),), "uint8"))
            ws.save_profile()
    """
)


def test_concurrent_writers_through_link_and_real_path_lose_nothing_and_leave_no_lock(
    tmp_path: Path,
) -> None:
    """Four processes, two through a symlink, two through the real path, each saving 20
    times: every writer's last save survives, the link stays, no lock file is left."""
    import time

    target = tmp_path / "p.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    start = str(time.time() + 1.5)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(link if rank % 2 else target), start],
            env={**os.environ, "RANK": str(rank)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(4)
    ]
    for process in processes:
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err[-3000:]
    profile = read_profile(target)
    assert profile["runs"] == 4 and profile["ranks"] == [0, 1, 2, 3]
    assert [s["peak"] for s in profile["slots"]] == [20 * 256 * (r + 1) for r in range(4)]
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "p.json"]


# ------------------------------------------------------------------- lock files (item 17)
def test_no_lock_file_is_left_beside_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_running_the_sizing_docs_leaves_no_lock_file(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "sizing.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    code = "\n\n".join(b for b in blocks if "import torch" not in b and "_memory_viz" not in b)
    script = tmp_path / "sizing_examples.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(tmp_path.glob("*.json"))
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob(".*.tmp"))


# ------------------------------------------------- counters at the limit, salvage (item 6)
def test_runs_saturate_at_the_schema_maximum_and_history_survives(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_valid(runs=LIMIT)))
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()  # saves once
    # close() saved again: the file must still read, with the old history
    profile = read_profile(path)
    assert profile["runs"] == LIMIT and profile["ranks"] == [0, 7]
    assert "old.py:1:history" in _sites(path) and len(profile["sites"]) == 2


def test_merging_never_yields_a_profile_the_reader_refuses() -> None:
    old, new = _valid(runs=LIMIT), _valid(runs=1)
    merged = merge_profiles(old, new)
    assert merged["runs"] == LIMIT
    assert check_profile(merged) is merged


def test_a_counter_beyond_the_maximum_is_clamped_and_the_history_kept(tmp_path: Path) -> None:
    """``runs: 2**63`` is what the unsaturated merge wrote."""
    path = tmp_path / "p.json"
    data = _valid(runs=LIMIT + 1)
    data["sites"][0]["peak"] = 10**30
    path.write_text(json.dumps(data))
    with pytest.warns(arena.ArenaWarning, match=r"clamped to 2\*\*63 - 1"):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws:
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    profile = read_profile(path)
    assert profile["runs"] == LIMIT
    old = [s for s in profile["sites"] if s["site"] == "old.py:1:history"]
    assert [s["peak"] for s in old] == [LIMIT]


def test_an_invalid_entry_is_dropped_and_the_rest_of_the_history_kept(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    data = _valid(runs=5)
    bad_site = {**copy.deepcopy(data["sites"][0]), "site": "bad.py:1:f", "ubatch": 9}
    data["sites"].append(bad_site)
    data["timeline"].append({"t": "soon"})
    data["ranks"].append("three")
    path.write_text(json.dumps(data))
    with pytest.warns(arena.ArenaWarning, match="call site #1") as caught:
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    message = str(caught[0].message)
    assert "timeline entry #1" in message and '"ranks" #1' in message
    with ws:
        assert ws.stats().slots[0].capacity == 4096  # presized from what was kept
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    profile = read_profile(path)
    assert profile["runs"] == 6 and profile["ranks"] == [0, 7]
    sites = _sites(path)
    assert "old.py:1:history" in sites and "bad.py:1:f" not in sites and len(sites) == 2


NOT_PROFILES = [
    "hello, world\n",
    "{not json",
    json.dumps({"model": "weights", "layers": 12}),
    json.dumps([1, 2]),
    json.dumps({**_valid(), "version": 99}),
    json.dumps({**_valid(), "slots": []}),
    json.dumps({**_valid(), "ubatches": "one"}),
]


@pytest.mark.parametrize("text", NOT_PROFILES)
def test_a_file_that_is_not_a_usable_profile_is_never_overwritten(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.warns(arena.ArenaWarning, match="left as it is") as caught:
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    assert len(caught) == 1
    with ws:  # lock() and close() neither write nor warn again
        ws.get_simultaneous(((100,), "float32"))
        ws.lock()
    assert path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_an_empty_file_is_replaced_quietly(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("\n")
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((100,), "float32"))
    assert read_profile(path)["runs"] == 1


def test_a_file_that_turns_into_a_non_profile_before_the_save_is_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.json"
    ws = arena.Arena("cpu", framework="numpy", profile=path)
    ws.get_simultaneous(((100,), "float32"))
    path.write_text("precious")
    with pytest.warns(arena.ArenaWarning, match="left as it is"):
        ws.lock()
    ws.close()  # warned once already
    assert path.read_text() == "precious"


def test_a_profile_in_a_missing_folder_warns_once_naming_the_folder(tmp_path: Path) -> None:
    import warnings

    path = tmp_path / "missing" / "profile.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ws = arena.Arena("cpu", framework="numpy", profile=path)
        ws.get_simultaneous(((4,), "float32"))
        ws.lock()
        ws.close()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert f"its folder {str(path.parent)!r} does not exist" in messages[0]


def test_a_missing_folder_is_said_at_construction_at_the_callers_line(tmp_path: Path) -> None:
    """With ARENA_PROFILE and no lock(), the warning came first at exit, from the arena's
    finalizer: ``weakref.py:590: ArenaWarning: ...``, not a line of the program."""
    path = tmp_path / "missing" / "profile.json"
    with pytest.warns(arena.ArenaWarning, match="does not exist") as caught:
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    assert len(caught) == 1 and caught[0].filename == __file__
    ws.get_simultaneous(((4,), "float32"))
    path.parent.mkdir()  # made after all: the save goes through
    ws.close()
    assert path.is_file()


def _held(lock: Path) -> str:
    """' (held)' when the lock file ``lock`` exists and its lock is held (by a
    descriptor an interrupted save left open), else ''."""
    import fcntl

    if not lock.exists():
        return ""
    with open(lock, "rb") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return " (held)"
    return ""


def test_an_interrupted_save_leaves_no_lock_file(tmp_path: Path) -> None:
    """A KeyboardInterrupt at every entry and return of arena's code during a save
    (:func:`~arena.observe.profilefile.write_merged`, onto no file and onto a profile):
    it comes out, the lock file and the temporary file are gone, and the profile reads
    as the old one or the merged one. Before, an interrupt at the check of the opened
    lock file (between creating it and the lock's ``try``) left an empty ``p.json.lock``
    behind, and one at the ``yield`` of the generator that held the lock ended it
    without its ``finally``: the lock file stayed, locked by a descriptor never closed,
    and the process's next save waited on it for ever."""
    path = tmp_path / "p.json"
    for existing in (False, True):
        counter = Injector()
        sys.settrace(counter)
        try:
            profilefile.write_merged(path, _valid())
        finally:
            sys.settrace(None)
        assert counter.count > 20
        left = []
        for at in range(1, counter.count + 1):
            if existing:
                path.write_text(json.dumps(_valid(runs=3)))
            else:
                path.unlink(missing_ok=True)
            injector = Injector(at)
            sys.settrace(injector)
            try:
                profilefile.write_merged(path, _valid())
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
            assert injector.fired
            names = sorted(p.name for p in tmp_path.iterdir())
            if names not in (["p.json"], []):
                left.append(f"{injector.where}: {names}{_held(tmp_path / 'p.json.lock')}")
                for name in names:  # the next save must not wait on a lock left held
                    if name != "p.json":
                        (tmp_path / name).unlink()
            elif names:
                assert read_profile(path)["runs"] in ((4, 3) if existing else (1,))
        assert left == []
