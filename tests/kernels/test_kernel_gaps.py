"""Gaps the mutation rerun of the kernels group found (issue 26, item 12): each test fails
on the mutants it names (applied by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest

from arena import (
    Arena,
    ArenaAsleepError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    SpecError,
)
from arena.base.layout import MAX_BYTES
from tests.gates import Probe
from tests.sources import RecordingSource, check_books


class _Bytes(enum.IntEnum):
    NONE = 0
    SOME = 64


@pytest.mark.parametrize("alignment", [1, 2, 16])
def test_triton_sizes_of_an_int_subclass_pass_the_full_check(alignment: int) -> None:
    # triton.py _check_ints #12, #14, #15, #17, #19: a size that is no exact int (an
    # IntEnum member) takes the full check, which refused every alignment, alignment 1 or
    # 2, or every power of two.
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        for size in _Bytes:
            tensor = allocate(size, alignment, None)
            assert isinstance(tensor, torch.Tensor) and tensor.numel() == size
            assert tensor.data_ptr() % alignment == 0


@pytest.mark.parametrize("size", [0, MAX_BYTES])
def test_a_bad_triton_alignment_is_named_whatever_the_valid_size(size: int) -> None:
    # triton.py _check_ints #5, #6, #7 and TritonAllocator.__call__ #22: the size check's
    # bounds 0 and MAX_BYTES moved in, or the full check given None for the alignment,
    # so a valid size of 0 or of the largest request was refused instead of the alignment
    # (or the alignment named as None).
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        with pytest.raises(SpecError, match=r"alignment must be .*got 3$") as info:
            allocate(size, 3, None)
        assert "size must be" not in str(info.value)


def test_a_bad_triton_request_names_what_is_wrong_with_its_own_value() -> None:
    # triton.py TritonAllocator.__call__ #7, #22, #27, #35: the full check given None for
    # the alignment (an int-subclass size refused, a bad size or a too large alignment
    # reported as the alignment None), and a bad stream's type named as NoneType.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        assert allocate(_Bytes.SOME, 16, None).numel() == 64
        with pytest.raises(SpecError, match=r"size must be .*got -1$"):
            allocate(-1, 16, None)
        with pytest.raises(SpecError, match=r"alignment must be .*got 2147483648$"):
            allocate(64, 1 << 31, None)
        with pytest.raises(SpecError, match=r"got str '7'"):
            allocate(64, 16, "7")


def test_a_refused_library_workspace_call_names_the_workspace_and_the_argument() -> None:
    # library.py LibraryWorkspaces.get #3, #5, #6, #7 (check_key), #44, #46, #47, #48
    # (check_new_key), #23 (check_flag), #26 (check_awake): the name given to the check
    # dropped, changed or replaced by None, so the error named a persistent key, None or
    # nothing instead of the library workspace key, zero_init or the workspace.
    with Arena("cpu", framework="numpy", source="virtual", max_bytes=1 << 24) as ws:
        with pytest.raises(SpecError, match=r"^library workspace key \[1\] \(list\)"):
            ws.get_library_workspace([1], 64)
        with pytest.raises(SpecError, match=r"^library workspace key nan \(float\)"):
            ws.get_library_workspace(float("nan"), 64)
        with pytest.raises(ConfigError, match=r"^zero_init must be True or False"):
            ws.get_library_workspace("k", 64, zero_init="yes")  # type: ignore[arg-type]
        ws.sleep(level=1)
        with pytest.raises(ArenaAsleepError, match=r"^library workspace 'k' from '"):
            ws.get_library_workspace("k", 64)
        ws.wake()


def test_a_library_workspace_refused_while_locked_says_what_it_needs_and_holds() -> None:
    # workspaces.py WorkspaceStore.locked_error #4, #5, #18, #19, #23, #24, #28, #32, #33: the
    # bytes held read 0 or 1, the error's current and slot fields None or left out, or
    # "a new" / another word for a workspace that had to grow.
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(1):
            ws.get_library_workspace("k", 4096)
        ws.lock()
        with ws.ubatch(1), pytest.raises(ArenaLockedError) as grow:
            ws.get_library_workspace("k", 8192)
        with ws.ubatch(1), pytest.raises(ArenaLockedError) as new:
            ws.get_library_workspace("n", 64)
    assert "needs a larger library workspace 'k' of " in str(grow.value)
    assert "(8192 bytes)" in str(grow.value)
    assert (grow.value.required, grow.value.current, grow.value.slot) == (8192, 4096, (1, 0))
    assert "needs a new library workspace 'n' of " in str(new.value)
    assert (new.value.required, new.value.current, new.value.slot) == (64, 0, (1, 0))


# ------------------------------------------------------------- library workspaces (rerun 5)
def test_zero_init_asked_once_zeroes_every_later_growth() -> None:
    # library.py get #72, workspaces.py hand_out #8, #9: a workspace handed out without
    # zero_init and asked for again with it did not remember it, so a later growth copied
    # the old bytes instead of zeroing the new block.
    with Arena("cpu", framework="numpy") as a:
        view = a.get_library_workspace("fi", 1024)
        view[:] = 7
        again = a.get_library_workspace("fi", 1024, zero_init=True)
        assert again is view and (again == 7).all()  # handed out: it keeps its contents
        grown = a.get_library_workspace("fi", 4096)
        assert grown.nbytes >= 4096 and not grown.any()


def test_library_workspaces_of_key_none_and_another_key_are_apart() -> None:
    # library.py get #41: the look-up read key None's entry for every key, so key "x"
    # got key None's block.
    with Arena("cpu", framework="numpy") as a:
        first = a.get_library_workspace(None, 4096)
        other = a.get_library_workspace("x", 1024)
        first[:] = 1
        other[:] = 2
        assert (first == 1).all() and (other == 2).all()
        assert a.get_library_workspace(None, 16) is first
        assert a.get_library_workspace("x", 16) is other


def test_a_workspace_replaced_while_the_capture_probe_runs_is_served_anew() -> None:
    # workspaces.py mark_captured #5: a block a growth replaced between serving it and
    # marking it captured was handed out (and marked) anyway: the caller got the old,
    # smaller block.
    state = {"armed": False}

    def probe() -> bool:
        if not state["armed"]:
            return False
        state["armed"] = False
        grown.append(a.get_library_workspace("fi", 4096))  # as another thread would
        return True

    grown: list[Any] = []
    with Arena("cpu", framework="numpy", capture_probe=probe) as a:
        a.get_library_workspace("fi", 1024)
        state["armed"] = True
        served = a.get_library_workspace("fi", 1024)
        assert served is grown[0] and served.nbytes >= 4096
        assert a.get_library_workspace("fi", 16) is served


def test_a_workspace_made_between_two_captures_is_retired_after_the_second() -> None:
    # workspaces.py mark_captured #8: the capture counter set to 1 instead of counted up,
    # so a workspace made after the first capture looked untouched by the second and was
    # released when it grew (a graph may read it).
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as a:
        a.get_library_workspace("a", 1024)
        for _ in range(2):
            if _:
                a.get_library_workspace("b", 2048)  # made after the first capture
            probe.capturing = True
            a.get_library_workspace("a", 1024)  # a capture the arena sees
            probe.capturing = False
        a.get_library_workspace("b", 8192)
        assert ("release", 2048) not in source.events
        assert a.stats().slots[0].retired_bytes == 2048
        assert a.release_retired() == 0  # captured: kept
        assert a.release_retired(include_captured=True) == 2048
        check_books(a, source)


def _profile_with_workspaces(path: Path, *sizes: int) -> None:
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.get_simultaneous(((64,), "float32"))
    profile = json.loads(path.read_text(encoding="utf-8"))
    profile["workspaces"] = [
        {"ubatch": 0, "lane": 0, "kind": "library", "key": "fi", "bytes": size} for size in sizes
    ]
    path.write_text(json.dumps(profile), encoding="utf-8")


def test_a_profile_that_lists_one_workspace_twice_presizes_it_to_the_larger(
    tmp_path: Path,
) -> None:
    # workspaces.py presize #13: the second, larger entry of a key grew it with need None
    # (a TypeError out of the arena's construction).
    path = tmp_path / "p.json"
    _profile_with_workspaces(path, 1024, 4096)
    with Arena("cpu", framework="numpy", profile=path) as a:
        allocations = a.stats().allocations
        assert a.get_library_workspace("fi", 4096).nbytes >= 4096
        assert a.stats().allocations == allocations


def test_a_presized_workspace_is_retired_when_it_grows_after_a_capture(tmp_path: Path) -> None:
    # workspaces.py presize #11: a presized workspace was made with kind None, so when it
    # grew after a capture the arena saw, it was released instead of retired.
    path = tmp_path / "p.json"
    _profile_with_workspaces(path, 1024)
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", profile=path, capture_probe=probe) as a:
        a.get_simultaneous(((64,), "float32"))
        probe.capturing = True
        a.get_simultaneous(((64,), "float32"))  # a capture seen while "fi" is current
        probe.capturing = False
        a.get_library_workspace("fi", 4096)
        assert ("release", 1024) not in source.events
        assert a.stats().slots[0].retired_bytes == 1024


def test_library_workspace_sizes_up_to_the_largest_pass_the_check_and_a_bad_one_is_named() -> None:
    # library.py check_nbytes #7 (the largest size, 2**63 - 1, refused as malformed
    # instead of reaching the cap), #9 (the type of a bad size named NoneType).
    with Arena("cpu", framework="numpy", max_bytes=1 << 24) as ws:
        with pytest.raises(ArenaOutOfMemoryError, match="max_bytes"):
            ws.get_library_workspace("k", MAX_BYTES & -256)  # the largest that rounds
        with pytest.raises(SpecError, match="rounds up to 9223372036854775808 bytes"):
            ws.get_library_workspace("k", MAX_BYTES)  # checked, then past the range
        with pytest.raises(
            SpecError,
            match=r"^nbytes must be an int from 1 to \d+ bytes, got str '64' "
            r"\(str is not a Python int: pass int\(\.\.\.\) of it, 64\)$",
        ):
            ws.get_library_workspace("k", "64")  # type: ignore[arg-type]
        with pytest.raises(SpecError, match=r"got int 0$"):
            ws.get_library_workspace("k", 0)


@pytest.mark.parametrize("kind", ["library", "triton"])
def test_a_block_past_the_address_range_is_refused_as_such_not_as_out_of_memory(
    kind: str,
) -> None:
    """2**63 - 1 bytes pass the size check but round up past what a buffer can address:
    refused as a plain request of that size is (naming the value, the limit and what to
    ask for), not as an allocation of 2**63 bytes that failed (issue 26: "could not
    allocate 9223372036854775808 bytes ... free memory elsewhere")."""
    with Arena("cpu", framework="numpy") as ws:
        if kind == "triton":
            pytest.importorskip("torch")
            ask = ws.triton_allocator()
            with pytest.raises(SpecError) as info:
                ask(MAX_BYTES, 256, None)
        else:
            with pytest.raises(SpecError) as info:
                ws.get_library_workspace("k", MAX_BYTES)
        message = str(info.value)
        assert (
            f"{MAX_BYTES} bytes" in message and "rounds up to 9223372036854775808 bytes" in message
        )
        assert f"more than the {MAX_BYTES} a buffer can address; ask " in message
        if kind == "library":
            assert "at most 9223372036854775552 bytes" in message
        with pytest.raises(SpecError, match=f"more than the {MAX_BYTES} a buffer can address"):
            ws.get_simultaneous(((MAX_BYTES,), "uint8"))  # the plain request's wording
        assert ws.stats().slots[0].capacity == 0  # nothing asked of the source
