"""Mutation gaps of the profile modules (issue 26 item 12): behaviour of
``arena.observe.profile``, ``profilefile``, ``profileschema`` and ``profilepaths`` that no
other test pinned down, each test written against a mutant that survived."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import arena
from arena.observe import profilefile
from arena.observe.profile import Recorder
from arena.observe.profilefile import (
    LIMIT,
    ProfileError,
    check_profile,
    describe_key,
    merge_profiles,
    read_profile,
    salvage_profile,
    write_atomically,
)
from arena.observe.profilepaths import sibling_profiles
from tests.profiles import profile_data


def _profile(**slot: Any) -> dict[str, Any]:
    """A valid one-slot profile; ``slot`` adds or replaces the slot's fields."""
    return check_profile(profile_data({"peak": 512, "capacity": 512, **slot}))


def _step(key: str | int, recorded_at: int) -> dict[str, Any]:
    """A valid stored step plan of ``key``: one block of 256 bytes."""
    return {
        "key": key,
        "counts": [1],
        "sizes": [256],
        "lasts": [0],
        "offsets": [0],
        "total": 256,
        "base": 0,
        "above": 0,
        "top_level": True,
        "recorded_at": recorded_at,
    }


# ------------------------------------------------------------------ profilefile.py
def test_a_merged_load_is_zero_when_neither_run_had_one() -> None:
    # merge_profiles #43: an older profile without "load" counted as a load of 1.
    old = _profile()
    assert "load" not in old["slots"][0]
    merged = merge_profiles(old, _profile(load=0))
    assert merged["slots"][0]["load"] == 0
    assert merge_profiles(_profile(load=0), _profile())["slots"][0]["load"] == 0
    assert merge_profiles(old, _profile(load=300))["slots"][0]["load"] == 300


def test_the_step_plans_of_a_run_that_planned_none_there_are_kept_on_merge() -> None:
    # merge_profiles #92 to #94, #113, #115: a newer run without step plans in a slot
    # dropped (or failed on) the plans an older run stored there; the docstring says
    # keys only the older run planned stay.
    forward = _step("forward", recorded_at=1)
    backward = _step(7, recorded_at=1)
    merged = merge_profiles(_profile(steps=[forward, backward]), _profile())
    assert merged["slots"][0]["steps"] == [forward, backward]
    # and the newer run's plan of a key wins over the older's, the older's other keys stay
    newer = _step("forward", recorded_at=2)
    merged = merge_profiles(_profile(steps=[forward, backward]), _profile(steps=[newer]))
    assert merged["slots"][0]["steps"] == [newer, backward]
    # neither planned: the merged slot has no step list at all
    assert "steps" not in merge_profiles(_profile(), _profile())["slots"][0]


def test_a_failed_write_whose_temporary_file_is_gone_raises_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # write_atomically #34: with the clean-up's suppress(None), removing a temporary file
    # that is already gone raised TypeError over the write's own error.
    target = tmp_path / "profile.json"

    def failing_dump(profile: Any, handle: Any, **kwargs: Any) -> None:
        for temporary in tmp_path.glob(".profile.json.*.tmp"):
            temporary.unlink()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profilefile.json, "dump", failing_dump)
    with pytest.raises(OSError, match="No space left on device") as caught:
        write_atomically(target, _profile())
    assert type(caught.value) is OSError
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ profileschema.py
def test_describe_key_names_the_arena_only_when_it_has_a_name() -> None:
    # describe_key #2 to #6, #8, #9.
    plain = "device cuda, 2 ubatches, 1 lanes, alignment 256"
    assert describe_key(("cuda", 2, 1, 256, None)) == plain
    assert describe_key(("cuda", 2, 1, 256)) == plain
    assert describe_key(("cuda", 2, 1, 256, "draft")) == plain + ", name 'draft'"
    assert describe_key(("cuda", 2, 1, 256, "")) == plain + ", name ''"


def test_a_workspace_entry_that_is_not_an_object_is_named_by_its_index() -> None:
    # _check_workspace #3: the message said "None must be an object".
    profile = _profile()
    profile["workspaces"] = [{"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 1}, 5]
    with pytest.raises(ProfileError) as caught:
        check_profile(profile)
    assert str(caught.value) == "workspace #1 must be an object, found 5"


def test_a_timeline_entry_that_is_not_an_object_is_dropped_with_its_index() -> None:
    # salvage_profile #126: the note said "None must be an object".
    profile = _profile()
    profile["timeline"] = ["grow"]
    repaired, notes = salvage_profile(profile)
    assert repaired["timeline"] == []
    assert notes == ["timeline entry #0 must be an object, found 'grow': dropped"]


@pytest.mark.parametrize("world", [0, -1, True, "2", 2.0, LIMIT + 1])
def test_salvage_drops_a_world_that_is_not_a_count_and_says_so(world: Any) -> None:
    # salvage_profile #211, #212, #214, #225 to #229.
    profile = {**_profile(), "world": world}
    with pytest.raises(ProfileError):
        check_profile(copy.deepcopy(profile))
    repaired, notes = salvage_profile(profile)
    assert "world" not in repaired
    assert notes == [f'"world" {world!r} is not a count: dropped']
    assert profile["world"] == world  # the data itself is not modified


@pytest.mark.parametrize("world", [1, 2, LIMIT])
def test_salvage_keeps_every_world_the_reader_accepts(world: int) -> None:
    # salvage_profile #224: a world of 2**63 - 1 was dropped.
    repaired, notes = salvage_profile({**_profile(), "world": world})
    assert repaired["world"] == world and notes == []
    assert json.loads(json.dumps(repaired)) == repaired


# ------------------------------------------------------------------ profile.py
class _SmallHost(arena.HostSource):
    """A host that refuses any allocation over 4096 bytes."""

    def allocate(self, nbytes: int) -> arena.Allocation:
        if nbytes > 4096:
            raise MemoryError(f"only 4096 bytes here, not {nbytes}")
        return super().allocate(nbytes)


def test_presize_warnings_name_the_profile_the_workspace_and_its_slot(tmp_path: Path) -> None:
    # _presize #22, #47 to #53: the warnings named the profile 'None', or failed on a
    # key the entry has not; #54: a refused workspace ended the presizing of the others.
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((1 << 20,), "uint8"))
        ws.get_library_workspace("flash", 1 << 20)
        ws.get_library_workspace("tiny", 64)
    with pytest.warns(arena.ArenaWarning) as caught:
        small = arena.Arena(framework="numpy", source=_SmallHost(), profile=path)
    with small:
        allocations = small.stats().allocations
        small.get_library_workspace("tiny", 64)  # presized after the refused one (#54)
        assert small.stats().allocations == allocations
        small.get_simultaneous(((100,), "float32"))  # the engine runs
    messages = [str(w.message) for w in caught]
    assert messages[0].startswith(f"arena profile {str(path)!r}: could not presize lane 0 ")
    workspace = [m for m in messages if "workspace" in m]
    assert len(workspace) == 1, messages
    assert workspace[0].startswith(
        f"arena profile {str(path)!r}: could not presize the library workspace 'flash' of "
        "slot (0, 0) to 1048576 bytes ("
    )
    assert workspace[0].endswith("it grows on demand")


def _recorder(path: Path) -> Recorder:
    return Recorder(path, ("cpu", 1, 1, 256, None), "exact")


def _workspaces(path: Path) -> list[tuple[str, Any, int]]:
    return [(w["kind"], w["key"], w["bytes"]) for w in read_profile(path)["workspaces"]]


@pytest.mark.parametrize("nbytes", [0, 1, 4096])
def test_a_recorded_library_workspace_of_any_size_and_key_is_saved(
    tmp_path: Path, nbytes: int
) -> None:
    # Recorder.workspace #7 (an int key not recorded), #16 (a first size of 0 or 1 byte
    # not recorded), #20, #21 (a new workspace did not mark the record for saving).
    path = tmp_path / "p.json"
    recorder = _recorder(path)
    recorder.workspace((0, 0), "workspace", 7, nbytes)
    recorder.workspace((0, 0), "workspace", "flash", nbytes)
    recorder.workspace((0, 0), "workspace", ("not", "json"), nbytes)  # not recorded
    recorder.save_if_dirty()
    assert _workspaces(path) == [("library", 7, nbytes), ("library", "flash", nbytes)]


def test_a_workspace_of_a_size_already_recorded_does_not_make_the_record_dirty(
    tmp_path: Path,
) -> None:
    # Recorder.workspace #18: the same size again marked the record as changed, so the
    # finalizer wrote the profile again for nothing.
    path = tmp_path / "p.json"
    recorder = _recorder(path)
    recorder.workspace((0, 0), "workspace", "flash", 4096)
    recorder.save_if_dirty()
    assert _workspaces(path) == [("library", "flash", 4096)]
    path.unlink()
    recorder.workspace((0, 0), "workspace", "flash", 4096)
    recorder.workspace((0, 0), "workspace", "flash", 1024)
    recorder.save_if_dirty()
    assert not path.exists()
    recorder.workspace((0, 0), "workspace", "flash", 4097)
    recorder.save_if_dirty()
    assert _workspaces(path) == [("library", "flash", 4097)]


# ------------------------------------------------------------------ profilepaths.py
def test_three_arenas_of_one_key_record_into_three_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # claim_profile_path #15, #16: the numbered names (a third arena of the same key
    # alive at once) were None.
    path = tmp_path / "profile.json"
    monkeypatch.setenv("ARENA_PROFILE", str(path))
    arenas = [arena.Arena("cpu", framework="numpy") for _ in range(3)]
    for scale, ws in enumerate(arenas, start=1):
        ws.get_simultaneous(((1024 * scale,), "float32"))
        ws.close()
    names = sorted(p.name for p in tmp_path.glob("profile*.json"))
    assert names == ["profile.cpu-1x1-a256-2.json", "profile.cpu-1x1-a256.json", "profile.json"]
    peaks = [read_profile(tmp_path / name)["slots"][0]["peak"] for name in names]
    assert peaks == [12288, 8192, 4096]


def test_an_unreadable_shared_profile_is_the_first_arenas_and_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _holds_another #3: a file that is no profile counted as another arena's, so the
    # arena recorded beside it without a word; it must warn and leave the file alone.
    path = tmp_path / "profile.json"
    path.write_text("not a profile", encoding="utf-8")
    monkeypatch.setenv("ARENA_PROFILE", str(path))
    with pytest.warns(arena.ArenaWarning, match=f"arena profile {str(path)!r} is ignored"):
        ws = arena.Arena("cpu", framework="numpy")
    with ws:
        ws.get_simultaneous(((64,), "float32"))
        assert ws.save_profile() is False  # warned once, above
    assert path.read_text(encoding="utf-8") == "not a profile"
    assert [p.name for p in tmp_path.glob("*.json")] == ["profile.json"]


def test_sibling_profiles_are_only_the_per_arena_files_beside_the_base(tmp_path: Path) -> None:
    # sibling_profiles #13: every other file of the folder counted as a sibling.
    for name in ("p.json", "p.cpu-1x1-a256.json", "p.draft.cpu-1x1-a256.json", "other.json"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    (tmp_path / "p.json.lock").write_text("", encoding="utf-8")
    found = [p.name for p in sibling_profiles(str(tmp_path / "p.json"))]
    assert found == ["p.cpu-1x1-a256.json", "p.draft.cpu-1x1-a256.json"]


# ----------------------------------------------------- profile.py: Recorder.save (rerun 5)
def _recording(path: Path) -> Recorder:
    recorder = _recorder(path)
    recorder.workspace((0, 0), "workspace", "flash", 4096)
    return recorder


def test_a_profile_that_cannot_be_written_warns_once_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recorder.save #18, #21, #22: the reason (the file system's words, or the missing
    # folder) and the path in the warning.
    missing = tmp_path / "no folder" / "p.json"
    recorder = _recording(missing)
    with pytest.warns(arena.ArenaWarning) as caught:
        assert recorder.save() is False
    assert str(caught[0].message).startswith(
        f"cannot write the arena profile {str(missing)!r} (its folder "
        f"{str(missing.parent)!r} does not exist); the engine continues"
    )

    def full_disk(target: Path, profile: Any) -> None:
        raise OSError(28, "No space left on device")

    path = tmp_path / "p.json"
    recorder = _recording(path)
    monkeypatch.setattr(profilefile, "write_atomically", full_disk)
    with pytest.warns(arena.ArenaWarning) as caught:
        assert recorder.save() is False
    assert len(caught) == 1
    assert str(caught[0].message).startswith(
        f"cannot write the arena profile {str(path)!r} (No space left on device); the engine"
    )


def test_a_profile_that_is_not_ours_is_not_saved_and_warns_once(tmp_path: Path) -> None:
    # Recorder.save #14: save() said the file was written.
    path = tmp_path / "p.json"
    path.write_text("not a profile", encoding="utf-8")
    recorder = _recording(path)
    with pytest.warns(arena.ArenaWarning, match="is left as it is"):
        assert recorder.save() is False
    assert recorder.save() is False  # warned once
    assert path.read_text(encoding="utf-8") == "not a profile"


def test_an_unexpected_failure_while_saving_warns_with_its_type_and_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recorder.save #29, #30, #31: the path, the exception's type and the result.
    from arena.observe import profile as profile_module

    def broken(path: Any, run: Any) -> None:
        raise ZeroDivisionError("boom")

    path = tmp_path / "p.json"
    recorder = _recording(path)
    monkeypatch.setattr(profile_module, "write_merged", broken)
    with pytest.warns(arena.ArenaWarning) as caught:
        assert recorder.save() is False
    assert str(caught[0].message).startswith(
        f"cannot save the arena profile {str(path)!r} (ZeroDivisionError: boom); the engine"
    )
    assert not recorder.dirty


def test_a_saved_record_is_clean_until_something_new_is_recorded(tmp_path: Path) -> None:
    # Recorder.save #3: a save left the record dirty, so the finalizer wrote it again.
    path = tmp_path / "p.json"
    recorder = _recording(path)
    assert recorder.save() is True
    path.unlink()
    recorder.save_if_dirty()
    assert not path.exists()


def test_a_replaced_profile_warns_once_naming_the_file(tmp_path: Path) -> None:
    # Recorder.save #37 to #40: the warning that the file was replaced came at every
    # save, or named no file.
    path = tmp_path / "p.json"
    other = _profile()
    other["device"] = "cuda"
    path.write_text(json.dumps(other), encoding="utf-8")
    recorder = _recording(path)
    with pytest.warns(arena.ArenaWarning) as caught:
        assert recorder.save() is True
    assert len(caught) == 1
    assert str(caught[0].message).startswith(
        f"arena profile {str(path)!r} was saved, but it was recorded for device cuda"
    )
    path.write_text(json.dumps(other), encoding="utf-8")  # replaced again meanwhile
    recorder.workspace((0, 0), "workspace", "flash", 8192)
    assert recorder.save() is True  # no second warning (filterwarnings = error)
    assert read_profile(path)["device"] == "cpu"


def test_only_workspace_and_triton_events_are_recorded_as_workspaces(tmp_path: Path) -> None:
    # Recorder.on_event #18: any event of a slot (a persistent buffer's) was recorded as
    # a workspace.
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_persistent("state", (256,), "float32")
        ws.get_simultaneous(((64,), "float32"))
        ws.get_library_workspace("flash", 1024)
    assert [(w["kind"], w["key"]) for w in read_profile(path)["workspaces"]] == [
        ("library", "flash")
    ]


def test_a_presize_is_on_the_timeline_as_the_profiles_growth_from_nothing(tmp_path: Path) -> None:
    # _presize #101 to #105: the timeline entry of a presize said it grew from 1 byte, or
    # named another caller or kind.
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((1024,), "float32"))
    profile = json.loads(path.read_text(encoding="utf-8"))
    profile["timeline"] = []  # the merge keeps an earlier run's warm-up otherwise
    path.write_text(json.dumps(profile), encoding="utf-8")
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        capacity = ws.stats().slots[0].capacity
    (entry,) = read_profile(path)["timeline"]
    assert (entry["old"], entry["new"], entry["caller"], entry["kind"]) == (
        0,
        capacity,
        "profile",
        "presize",
    )


def test_a_noted_request_or_resize_alone_is_saved_by_the_finalizer(tmp_path: Path) -> None:
    # Recorder.note #58, Recorder.resized #36: a new call site or a growth did not mark the
    # record as changed, so the finalizer (save_if_dirty) left it unsaved.
    path = tmp_path / "p.json"
    recorder = _recorder(path)
    recorder.note("x.py:1:f", 0, (((64,), "float32"),), 256)
    recorder.save_if_dirty()
    assert read_profile(path)["sites"][0]["site"] == "x.py:1:f"
    path.unlink()
    recorder.resized((0, 0), 0, 4096, "x.py:1:f", "grow")
    recorder.save_if_dirty()
    assert read_profile(path)["slots"][0]["capacity"] == 4096
