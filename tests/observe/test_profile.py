"""Profiles: recorded while unlocked, merged safely, presizing the next start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import arena
from arena.observe.profilefile import MAX_LAYOUTS, read_profile

#: A warm-up as an engine runs it: two micro-batches, two call sites, one sibling.
WARM_UP = textwrap.dedent(
    """
    import os, sys
    import arena

    def attention(ws, tokens):
        return ws.get_simultaneous(((tokens, 64), "float32"), ((tokens,), "int32"))

    def moe(ws, tokens):
        return ws.get_simultaneous(((tokens * 2, 128), "float16"))

    def warm_up(ws, scale):
        with ws.ubatch(0):
            for tokens in (16, 64 * scale, 32):
                attention(ws, tokens)
                moe(ws, tokens)
        with ws.ubatch(1):
            attention(ws, 8)
    """
)


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> None:
    import os

    result = subprocess.run(
        [sys.executable, "-c", WARM_UP + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _replay(ws: arena.Arena, scale: int) -> None:
    namespace: dict[str, object] = {}
    exec(WARM_UP, namespace)  # the same call sites as the recording process
    namespace["warm_up"](ws, scale)  # type: ignore[operator]


def test_a_profile_from_one_process_presizes_the_next(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    _run(
        """
        with arena.Arena("cpu", ubatches=2, framework="numpy", profile=sys.argv[1]) as ws:
            warm_up(ws, 4)
            ws.lock()
        """,
        str(path),
    )
    recorded = read_profile(path)
    assert recorded["runs"] == 1 and recorded["ubatches"] == 2
    peak = arena.compute_layout((((512, 128), "float16"),)).total  # moe at 256 tokens
    assert recorded["slots"][0]["peak"] == peak
    assert {s["site"].split(":")[-1] for s in recorded["sites"]} == {"attention", "moe"}

    with arena.Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        after_construction = ws.stats()
        assert after_construction.allocations == 2  # one allocation per slot
        assert [s.capacity for s in after_construction.slots] == [peak, peak]
        _replay(ws, 4)
        ws.lock()
        with ws.ubatch(1):  # the sibling was presized too: the recorded peak fits
            ws.get_simultaneous(((512, 128), "float16"))
        stats = ws.stats()
        assert stats.growths == after_construction.growths == 2
        assert stats.allocations == 2 and stats.slots[0].retired_buffers == 0
    merged = read_profile(path)
    assert merged["runs"] == 2 and merged["slots"][0]["peak"] == peak


def test_locked_requests_and_hits_record_nothing_new(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((1000,), "float32"))
        ws.lock()
        ws.get_simultaneous(((10,), "float32"))  # smaller, while locked
    (site,) = read_profile(path)["sites"]
    assert [lay["views"] for lay in site["layouts"]] == [[[[1000], "float32"]]]


def test_layouts_are_bounded_to_the_largest(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        for n in range(1, 31):
            ws.get_simultaneous(((n * 100,), "float32"))
    (site,) = read_profile(path)["sites"]
    sizes = [lay["views"][0][0][0] for lay in site["layouts"]]
    assert sizes == [n * 100 for n in range(30, 30 - MAX_LAYOUTS, -1)]
    assert site["layouts"][0]["padding"] == site["layouts"][0]["total"] - 12000


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "arena-profile", "version": 99}', "schema version 99"),
        (
            '{"format": "arena-profile", "version": 1, "device": "cpu", "ubatches": 1, '
            '"lanes": 1, "alignment": 256, "runs": 1, "slots": []}',
            "must list 1 slots",
        ),
        ("[1, 2]", "not an arena profile"),
    ],
)
def test_a_corrupt_profile_warns_and_is_ignored(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.warns(arena.ArenaWarning, match=reason):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws:
        assert ws.stats().allocations == 0  # nothing presized
        ws.get_simultaneous(((10,), "float32"))
        ws.lock()  # saves nothing: not a file this arena may overwrite (warned once already)
    assert path.read_text() == content  # left as it is


def test_a_profile_of_another_configuration_warns_and_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((10,), "float32"))
    with pytest.warns(arena.ArenaWarning, match="recorded for device cpu, 2 ubatches"):
        ws = arena.Arena("cpu", ubatches=1, framework="numpy", profile=path)
    ws.close()
    assert read_profile(path)["ubatches"] == 1  # replaced at close()


def test_an_unwritable_profile_warns_and_the_engine_continues(tmp_path: Path) -> None:
    path = tmp_path / "missing-directory" / "p.json"
    # said at construction (the missing folder); lock() tries, fails alike and is silent
    # (filterwarnings = error would raise a second warning)
    with pytest.warns(arena.ArenaWarning, match="cannot write the arena profile"):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws:
        ws.get_simultaneous(((10,), "float32"))
        ws.lock()
        assert ws.is_locked and not path.exists()
        ws.get_simultaneous(((10,), "float32"))
        assert ws.save_profile() is False  # tried again, the same failure: not warned again
        ws.close()


def test_environment_variable_covers_process_wide_arenas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "env.json"
    monkeypatch.setenv("ARENA_PROFILE", str(path))
    ws = arena.init_arena("cpu", framework="numpy")
    ws.get_simultaneous(((100,), "float32"))
    arena.lock_arena("cpu")
    assert read_profile(path)["slots"][0]["peak"] == 512


def test_saved_at_interpreter_exit_without_lock_or_close(tmp_path: Path) -> None:
    path = tmp_path / "exit.json"
    _run(
        """
        ws = arena.Arena("cpu", ubatches=2, framework="numpy", profile=sys.argv[1])
        warm_up(ws, 1)  # never locked, never closed: saved by the exit hook
        """,
        str(path),
    )
    profile = read_profile(path)
    assert profile["slots"][0]["peak"] > 0 and profile["runs"] == 1


def test_ranks_writing_one_file_at_once_merge_into_one(tmp_path: Path) -> None:
    """Two processes (ranks) each save 60 times with growing sizes, concurrently."""
    import os
    import time

    path = tmp_path / "ranks.json"
    code = WARM_UP + textwrap.dedent(
        """
        import time

        rank = int(os.environ["RANK"])
        time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # start together
        with arena.Arena("cpu", ubatches=2, framework="numpy", profile=sys.argv[1]) as ws:
            for step in range(1, 31):
                with ws.unlocked():
                    with ws.ubatch(0):
                        # rank 0 peaks in attention, rank 1 in moe
                        attention(ws, step * (20 if rank == 0 else 1))
                        moe(ws, step * (1 if rank == 0 else 20))
                ws.save_profile()
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), str(time.time() + 1.0)],
            env={**os.environ, "RANK": str(rank)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
    profile = read_profile(path)
    assert profile["runs"] == 2 and profile["ranks"] == [0, 1]
    peaks = {s["site"].split(":")[-1]: s["peak"] for s in profile["sites"] if s["ubatch"] == 0}
    attention = arena.compute_layout((((600, 64), "float32"), ((600,), "int32"))).total
    moe = arena.compute_layout((((1200, 128), "float16"),)).total
    assert peaks == {"attention": attention, "moe": moe}  # each rank's maximum survives
    assert profile["slots"][0]["peak"] == max(attention, moe)
    assert not list(tmp_path.glob(".ranks.json.*.tmp"))  # no temporary file left behind
    json.loads(path.read_text())


def test_a_writer_waits_for_the_file_lock(tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    import threading

    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((10,), "float32"))
        with open(tmp_path / "p.json.lock", "a+b") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another process merging
            writer = threading.Thread(target=ws.save_profile)
            writer.start()
            writer.join(0.3)
            assert writer.is_alive() and not path.exists()
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        writer.join(10)
        assert not writer.is_alive() and read_profile(path)["runs"] == 1


def test_a_presize_that_runs_out_of_memory_warns_and_starts_unsized(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((1 << 20,), "uint8"))

    class SmallHost(arena.HostSource):
        def allocate(self, nbytes: int) -> arena.Allocation:
            if nbytes > 4096:
                raise MemoryError(f"only 4096 bytes here, not {nbytes}")
            return super().allocate(nbytes)

    with pytest.warns(arena.ArenaWarning, match="could not presize lane 0 to 1048576 bytes"):
        ws = arena.Arena(framework="numpy", source=SmallHost(), profile=path)
    with ws:
        assert ws.stats().allocations == 0
        ws.get_simultaneous(((100,), "float32"))  # the engine runs
