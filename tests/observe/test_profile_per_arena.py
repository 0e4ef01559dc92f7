"""ARENA_PROFILE shared by every arena of a process: each arena records into a file of its
own (keyed by its settings and name), so none overwrites another's and every one is
presized on the next start; ``python -m arena demo`` never touches the operator's profile."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import arena
from arena.observe.profilefile import read_profile


def _engine(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """One engine start: three arenas (two settings, one named twin); returns what each
    was presized to before its first request, then warms each up and closes it."""
    monkeypatch.setenv("ARENA_PROFILE", str(path))
    arenas = [
        arena.Arena("cpu", framework="numpy"),
        arena.Arena("cpu", ubatches=2, framework="numpy"),
        arena.Arena("cpu", framework="numpy", name="draft"),
    ]
    presized = [tuple(s.capacity for s in ws.stats().slots) for ws in arenas]
    for scale, ws in enumerate(arenas, start=1):
        ws.get_simultaneous(((1024 * scale,), "float32"))
        ws.close()
    del arenas, ws
    gc.collect()  # the claims on the files end with the arenas, as at a process's exit
    return presized


def test_every_arena_of_a_process_keeps_its_own_profile_and_is_presized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "profile.json"
    assert _engine(path, monkeypatch) == [(0,), (0, 0), (0,)]
    files = sorted(p.name for p in tmp_path.glob("profile*.json"))
    assert files == ["profile.cpu-2x1-a256.json", "profile.draft.cpu-1x1-a256.json", "profile.json"]
    assert read_profile(path)["slots"][0]["peak"] == 4096  # the first arena's, unchanged
    assert "name" not in read_profile(path)
    assert read_profile(tmp_path / "profile.draft.cpu-1x1-a256.json")["name"] == "draft"
    # The next start: every arena is presized from its own profile, none warns.
    assert _engine(path, monkeypatch) == [(4096,), (8192, 8192), (12288,)]


def test_an_arena_built_first_on_a_restart_does_not_take_another_arenas_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "profile.json"
    _engine(path, monkeypatch)
    with arena.Arena("cpu", ubatches=2, framework="numpy") as ws:  # built first this time
        assert [s.capacity for s in ws.stats().slots] == [8192, 8192]
    with arena.Arena("cpu", framework="numpy") as ws:
        assert ws.stats().slots[0].capacity == 4096


def test_the_demo_never_touches_an_operators_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena.tools.demo import main as demo

    path = tmp_path / "engine.json"
    _engine(path, monkeypatch)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert demo(["--device", "cpu", "--framework", "numpy", "--steps", "20"]) == 0
    assert "FAILED" not in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_an_arena_name_is_checked_and_shown() -> None:
    with arena.Arena("cpu", framework="numpy", name="engine-1") as ws:
        assert ws.name == "engine-1" and "name='engine-1'" in repr(ws)
    assert arena.Arena("cpu", framework="numpy").name is None
    for bad in ("", "a/b", "x" * 65, 3, "dot.ted"):
        with pytest.raises(arena.ConfigError, match="name must be"):
            arena.Arena("cpu", framework="numpy", name=bad)  # type: ignore[arg-type]


def test_profile_false_records_nothing_even_with_arena_profile_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_PROFILE", str(tmp_path / "p.json"))
    with arena.Arena("cpu", framework="numpy", profile=False) as ws:
        ws.get_simultaneous(((64,), "float32"))
        assert ws.save_profile() is False
    assert list(tmp_path.iterdir()) == []
