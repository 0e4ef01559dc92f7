"""Budgets: ``layout_bytes`` (no arena), ``planned_bytes`` (what lock() will hold), the
``max_bytes`` cap (``ARENA_MAX_BYTES``) and ``memory_stats`` under torch's key names."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arena
from arena import (
    Arena,
    ArenaOutOfMemoryError,
    ConfigError,
    SpecError,
    compute_layout,
    layout_bytes,
)
from arena.planning.books import books_of
from tests.gates import moving_only
from tests.sources import FailingSource, RecordingSource, check_books

MB = 1 << 20


# ====================================================================== layout_bytes
def test_layout_bytes_is_what_reserve_sizes_to() -> None:
    specs = (((256, 1024), "float32"), ((256, 64), "bfloat16"), ((3,), "int8"))
    assert layout_bytes(*specs) == compute_layout(specs, 256).total == 1048576 + 32768 + 256
    assert layout_bytes(*specs, alignment=4096) == 1048576 + 32768 + 4096
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as a:
        assert a.reserve(*specs) == layout_bytes(*specs)
        assert source.allocations() == [layout_bytes(*specs)]


def test_layout_bytes_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="alignment"):
        layout_bytes(((4,), "float32"), alignment=3)
    with pytest.raises(SpecError):
        layout_bytes(((-1,), "float32"))
    assert layout_bytes() == 0


# ====================================================================== planned_bytes
def test_planned_bytes_is_what_lock_will_hold() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=3, lanes=2) as a:
        with a.ubatch(2):  # before its sibling grows: lock() retires this small buffer
            a.get_simultaneous(((10,), "float32"))
        with a.ubatch(0):
            a.get_simultaneous(((1000, 1000), "float32"))
            a.get_persistent("kv", (100,), "float16")
            a.get_library_workspace("fi", 5000)
        with a.ubatch(1), a.lane(1):
            a.get_simultaneous(((10,), "float32"))
        planned = a.planned_bytes()
        held = a.stats().live_bytes
        assert planned > held
        a.lock()
        assert a.stats().live_bytes == planned == sum(source.live.values())
        assert a.planned_bytes() == planned  # locked: what it holds
        a.release_retired()  # the smaller buffers lock() retired
        assert a.planned_bytes() < planned


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # ubatch
            st.integers(0, 1),  # lane
            st.sampled_from(["scratch", "persistent", "library"]),
            st.integers(1, 5000),  # elements or bytes
            st.sampled_from(["a", "b"]),  # key
        ),
        max_size=12,
    )
)
def test_planned_bytes_predicts_lock_exactly(ops: list[tuple[int, int, str, int, str]]) -> None:
    with Arena("cpu", framework="numpy", ubatches=3, lanes=2) as a:
        for ubatch, lane, kind, n, key in ops:
            with a.ubatch(ubatch), a.lane(lane):
                if kind == "scratch":
                    a.get_simultaneous(((n,), "float32"))
                elif kind == "persistent":
                    try:
                        a.get_persistent(key, (n,), "uint8")
                    except arena.PersistentMismatchError:
                        pass
                else:
                    a.get_library_workspace(key, n)
        planned = a.planned_bytes()
        a.lock()
        assert a.stats().live_bytes == planned


def test_planned_bytes_counts_steps_lock_will_plan() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.step("layer"):  # recorded once: lock() plans it
            a.get_simultaneous(((1000,), "float32"))
            a.get_simultaneous(((3000,), "float32"), ((500,), "int64"))
        a.get_simultaneous(((10,), "float32"))
        planned = a.planned_bytes()
        book = books_of(a._table.slots[0])["layer"]
        assert not book.planned  # planned_bytes() plans a copy: the key is still recording
        a.lock()
        assert book.planned
        assert a.stats().live_bytes == planned


def test_planned_bytes_of_a_closed_arena_is_zero() -> None:
    a = Arena("cpu", framework="numpy")
    a.get_simultaneous(((100,), "float32"))
    a.close()
    assert a.planned_bytes() == 0


# ====================================================================== the cap
def test_growth_past_the_cap_names_it_and_keeps_the_old_capacity() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", max_bytes=2 * MB) as a:
        (view,) = a.get_simultaneous(((MB,), "uint8"))
        view[:] = 5
        (grown,) = a.get_simultaneous(((2 * MB,), "uint8"))  # old released first: fits
        with pytest.raises(ArenaOutOfMemoryError) as err:
            a.get_simultaneous(((2 * MB + 1,), "uint8"))
        message = str(err.value)
        assert "max_bytes=2097152 (2.00 MB)" in message
        assert "needs 2097408 bytes" in message and "holds 2097152 bytes" in message
        assert "test_budgets.py" in message and "ARENA_MAX_BYTES" in message
        assert a.stats().slots[0].capacity == 2 * MB
        (again,) = a.get_simultaneous(((2 * MB,), "uint8"))
        assert again.ctypes.data == grown.ctypes.data  # still served from the old buffer
        assert source.allocations() == [MB, 2 * MB]  # the refusal touched nothing
        assert a.memory_stats()["num_ooms"] == 1
        check_books(a, source)


def test_the_cap_is_exact_at_the_boundary() -> None:
    with Arena("cpu", framework="numpy", max_bytes=MB + 4096) as a:
        a.get_persistent("p", (4096,), "uint8")
        a.reserve_bytes(MB)  # exactly the cap
        assert a.memory_stats()["reserved_bytes.all.current"] == MB + 4096
    with Arena("cpu", framework="numpy", max_bytes=MB + 4095) as a:
        a.get_persistent("p", (4096,), "uint8")
        with pytest.raises(ArenaOutOfMemoryError, match="refuses growing slot"):
            a.reserve_bytes(MB)


@contextmanager
def _a_captured_megabyte() -> Iterator[Arena]:
    """An arena capped at 4 MB whose 1 MB slot buffer a (probed) CUDA graph capture read:
    the next growth retires it instead of releasing it."""
    probe_state = {"on": False}
    with Arena(
        "cpu", framework="numpy", max_bytes=4 * MB, capture_probe=lambda: probe_state["on"]
    ) as a:
        a.get_simultaneous(((MB,), "uint8"))
        probe_state["on"] = True
        a.get_simultaneous(((MB,), "uint8"))  # served during a capture: retired on growth
        probe_state["on"] = False
        yield a


@moving_only(
    "counts a scratch buffer retired by growth after a capture; growth in place retires nothing"
)
def test_the_cap_counts_every_kind_of_block() -> None:
    pytest.importorskip("torch")
    with _a_captured_megabyte() as a:
        a.reserve_bytes(2 * MB)  # 1 MB retired + 2 MB scratch
        with pytest.raises(ArenaOutOfMemoryError, match="persistent buffer"):
            a.get_persistent("p", (MB + 1,), "uint8")
        a.get_library_workspace("fi", MB // 2)
        with pytest.raises(ArenaOutOfMemoryError, match="library workspace 'fi'"):
            a.get_library_workspace("fi", MB)  # old + new while it copies
        with pytest.raises(ArenaOutOfMemoryError, match="Triton block"):
            a.triton_allocator()(MB, 16, 7)
        assert a.release_retired(include_captured=True) == MB
        a.get_library_workspace("fi", MB)
        assert a.memory_stats()["num_ooms"] == 3


def test_lock_past_the_cap_allocates_nothing() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2, max_bytes=3 * MB) as a:
        with a.ubatch(0):  # ubatch 1 never runs: lock() would give it 2 MB too
            a.get_simultaneous(((2 * MB,), "uint8"))
        before = list(source.events)
        with pytest.raises(ArenaOutOfMemoryError, match=r"lock\(\)'s sizing"):
            a.lock()
        assert source.events == before and not a.is_locked
        check_books(a, source)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4GiB", 4 << 30), ("512 MiB", 512 << 20), ("1048576", 1 << 20), ("8kib", 8192)],
)
def test_arena_max_bytes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, value: int
) -> None:
    monkeypatch.setenv("ARENA_MAX_BYTES", text)
    with Arena("cpu", framework="numpy") as a:
        assert a.memory_stats()["arena.max_bytes"] == value
    with Arena("cpu", framework="numpy", max_bytes=4096) as a:  # the argument wins
        assert a.memory_stats()["arena.max_bytes"] == 4096


@pytest.mark.parametrize("text", ["4GB", "-1", "0", "1.5GiB", "lots"])
def test_a_bad_arena_max_bytes_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("ARENA_MAX_BYTES", text)
    with pytest.raises(ConfigError, match=r"ARENA_MAX_BYTES must be a number of bytes.*GiB"):
        Arena("cpu", framework="numpy")


@pytest.mark.parametrize("value", [0, -5, True, 2.5, "many"])
def test_a_bad_max_bytes_argument_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="max_bytes must be a number of bytes"):
        Arena("cpu", framework="numpy", max_bytes=value)  # type: ignore[arg-type]


# Spellings that int(), str.isdigit() or str.strip() would have let through.
BAD_SPELLINGS = [
    "\uff11\uff12\uff13",  # full-width digits
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\u00b2",  # superscript two: isdigit() says yes, int() says no
    "\U0001d7d1",  # MATHEMATICAL BOLD DIGIT THREE
    "1_000",
    "4_096KiB",
    "+5",
    "+4GiB",
    "1 000",
    "1\t000",
    "4\u00a0GiB",  # a no-break space between
    "\u30004GiB",  # an ideographic space before
    "4\u212aiB",  # the Kelvin sign, which folds to 'k'
    "4 Gi B",
    "0x1000",
    "4e9",
    "4.0GiB",
    "",
]


@pytest.mark.parametrize("text", BAD_SPELLINGS)
def test_only_ascii_digits_make_a_byte_count(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    with pytest.raises(ConfigError, match=r"max_bytes must be a number of bytes.*ASCII digits"):
        Arena("cpu", framework="numpy", max_bytes=text)
    if text:  # an empty variable is an unset one
        monkeypatch.setenv("ARENA_MAX_BYTES", text)
        with pytest.raises(ConfigError, match=r"ARENA_MAX_BYTES must be a number of bytes"):
            Arena("cpu", framework="numpy")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2**63, "9223372036854775808"),
        ("9223372036854775808", "'9223372036854775808' \\(9223372036854775808 bytes\\)"),
        ("8388608TiB", "'8388608TiB' \\(9223372036854775808 bytes\\)"),
        ("1" + "0" * 5000, r"'1000.*\.\.\. \(5003 characters\)"),
        (10**30, "1" + "0" * 30),
    ],
    ids=["int", "digits", "unit", "5001-digits", "huge-int"],
)
def test_a_byte_count_past_2_63_is_refused_naming_the_limit(
    monkeypatch: pytest.MonkeyPatch, value: object, shown: str
) -> None:
    limit = rf"past the limit of {2**63 - 1} bytes \(2\*\*63 - 1\)"
    with pytest.raises(ConfigError, match=rf"^max_bytes is {shown}, {limit}"):
        Arena("cpu", framework="numpy", max_bytes=value)  # type: ignore[arg-type]
    monkeypatch.setenv("ARENA_MAX_BYTES", str(value))
    with pytest.raises(ConfigError, match=rf"ARENA_MAX_BYTES is .*{limit}"):
        Arena("cpu", framework="numpy")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2**63 - 1, 2**63 - 1),
        ("9223372036854775807", 2**63 - 1),
        ("8388607TiB", 8388607 << 40),
        (" \t4GiB\n", 4 << 30),
        ("512 MiB", 512 << 20),
        ("0004096", 4096),
        ("16b", 16),
    ],
)
def test_good_byte_counts_up_to_the_limit(value: object, expected: int) -> None:
    with Arena("cpu", framework="numpy", max_bytes=value) as a:  # type: ignore[arg-type]
        assert a.memory_stats()["arena.max_bytes"] == expected
        assert type(a.memory_stats()["arena.max_bytes"]) is int


# ====================================================================== memory_stats
POOLS = ("all", "large_pool", "small_pool")
# The torch keys that mean something for an arena (issue 30, item 4): the source's figures
# with their accumulated metrics, the slots' figures with current and peak, the unused
# scratch tails with current only, and the counters.
TORCH_KEYS = (
    *(
        f"{family}.{pool}.{metric}"
        for family in ("reserved_bytes", "segment")
        for pool in POOLS
        for metric in ("current", "peak", "allocated", "freed")
    ),
    *(
        f"{family}.{pool}.{metric}"
        for family in ("allocated_bytes", "active_bytes", "requested_bytes", "allocation", "active")
        for pool in POOLS
        for metric in ("current", "peak")
    ),
    *(
        f"{family}.{pool}.current"
        for family in ("inactive_split", "inactive_split_bytes")
        for pool in POOLS
    ),
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
)


def test_memory_stats_use_torchs_key_names() -> None:
    with Arena("cpu", framework="numpy") as a:
        stats = a.memory_stats()
    torch_keys = [k for k in stats if not k.startswith("arena.")]
    assert sorted(torch_keys) == sorted(TORCH_KEYS)
    if importlib.util.find_spec("torch") is not None:  # the names torch documents
        import torch

        documented = torch.cuda.memory_stats.__doc__ or ""
        for key in torch_keys:
            family = key.split(".")[0]
            # torch's docstring spells the allocation count "allocated.*"; its allocator and
            # its own consistency test (test_cuda.py) use "allocation.*".
            family = "allocated" if family == "allocation" else family
            assert f'"{family}' in documented, key
            if "." in key:
                pool, metric = key.split(".")[1:]
                pattern = rf'"{family}\.\{{[^}}]*{pool}[^}}]*\}}\.\{{[^}}]*{metric}'
                assert re.search(pattern, documented), key


def test_memory_stats_figures_and_peaks() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2) as a:
        a.get_simultaneous(((1000,), "float32"))  # 4000 bytes, 4096 with padding
        a.get_persistent("p", (100,), "float16")  # 200 of 256
        a.get_library_workspace("fi", 1000)  # 1024
        stats = a.memory_stats()
        assert stats["reserved_bytes.all.current"] == 4096 + 256 + 1024
        # torch counts a block's rounding as allocated, the bytes asked as requested
        assert stats["allocated_bytes.all.current"] == 4096 + 256 + 1024
        assert stats["requested_bytes.all.current"] == 4096 + 200 + 1024
        assert stats["segment.all.current"] == 3
        assert stats["num_device_alloc"] == 3 and stats["num_device_free"] == 0
        assert stats["arena.scratch_bytes"] == 4096
        assert stats["arena.persistent_bytes"] == 256
        assert stats["arena.workspace_bytes"] == 1024
        assert stats["arena.planned_bytes"] == a.planned_bytes()
        a.get_simultaneous(((10_000,), "float32"))  # growth: 4096 freed, 40192 allocated
        stats = a.memory_stats()
        assert stats["reserved_bytes.all.current"] == 40192 + 256 + 1024
        assert stats["reserved_bytes.all.peak"] == 40192 + 256 + 1024
        assert stats["num_device_free"] == 1
        a.reset_peak_memory_stats()
        assert a.memory_stats()["reserved_bytes.all.peak"] == 40192 + 256 + 1024
        allocated = a.memory_stats()["allocated_bytes.all.current"]
    stats = a.memory_stats()
    assert stats["reserved_bytes.all.current"] == 0 and stats["allocated_bytes.all.current"] == 0
    assert stats["reserved_bytes.all.peak"] == 40192 + 256 + 1024
    assert stats["allocated_bytes.all.peak"] == allocated
    assert stats["arena.closed"] == 1
    a.reset_peak_memory_stats()
    assert a.memory_stats()["reserved_bytes.all.peak"] == 0


def test_num_ooms_counts_the_source_running_out() -> None:
    with Arena(source=FailingSource(limit=MB), framework="numpy") as a:
        with pytest.raises(ArenaOutOfMemoryError):
            a.get_simultaneous(((2 * MB,), "uint8"))
        assert a.memory_stats()["num_ooms"] == 1
        assert a.memory_stats()["num_alloc_retries"] == 0


def test_decimal_units_are_refused_saying_why() -> None:
    with pytest.raises(ConfigError, match=r"'MB' is ambiguous.*write MiB"):
        Arena("cpu", framework="numpy", max_bytes="8MB")


@moving_only("retires a captured buffer on growth; growth in place retires nothing")
def test_a_growth_that_retires_a_captured_buffer_counts_it_against_the_cap() -> None:
    """Plant round 47 on the cap's check of a growth (``Slot._grow``): the retired block is
    not freed, so the check counts nothing freed for it. A check that counted the old block
    freed whatever became of it let the arena grow past ``max_bytes`` (both blocks held)."""
    with _a_captured_megabyte() as a:
        with pytest.raises(ArenaOutOfMemoryError, match="max_bytes"):
            a.get_simultaneous(((3 * MB + MB // 2,), "uint8"))  # 1 MB retired + 3.5 MB
        assert a.memory_stats()["allocated_bytes.all.current"] <= 4 * MB
