"""caller_info: the first frame outside arena, walked from ``skip`` frames up; a stack
with fewer frames than that (a call from C at the bottom of a stack: an atexit handler)
names no caller rather than raising."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

import arena.adapters
import pytest

import arena
from arena import Arena, ArenaWarning
from arena.base import events
from arena.base.events import caller_info


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_the_caller_is_named_by_its_own_line() -> None:
    line, site = _line(), caller_info()
    assert site == f"test_caller_info.py:{line}:test_the_caller_is_named_by_its_own_line"


def test_more_frames_skipped_than_the_stack_holds_names_no_caller() -> None:
    depth = 0
    while True:
        try:
            sys._getframe(depth)
        except ValueError:
            break
        depth += 1
    assert caller_info(depth + 1) == "<unknown>"
    assert caller_info(10**6) == "<unknown>"


# Mutation Round 11: events.py's own tests. Arena's files are resolved once per process
# and the internal folders found once, so each test below starts from empty memos.


@pytest.fixture
def fresh_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_internal_dirs", None)
    monkeypatch.setattr(events, "_INTERNAL_FILES", {})


@pytest.mark.usefixtures("fresh_memos")
def test_the_internal_folders_are_arenas_its_adapters_and_contextlib() -> None:
    found = events._internal()
    package = str(Path(arena.__file__).resolve().parent) + os.sep
    adapters = str(Path(arena.adapters.__file__).resolve().parent) + os.sep
    contextlib_file = str(Path(contextlib.__file__).resolve())
    assert found == (package, adapters, contextlib_file)
    assert events._internal() is found  # found once


@pytest.mark.usefixtures("fresh_memos")
def test_a_pseudo_file_is_never_arenas_even_from_inside_its_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``<string>`` (exec, doctest) is no file: not resolved against the working folder,
    which may be arena's own."""
    monkeypatch.chdir(Path(arena.__file__).resolve().parent)
    assert events._is_internal("<string>") is False
    assert events._is_internal("core.py") is True  # a relative path is resolved


@pytest.mark.usefixtures("fresh_memos")
def test_a_link_into_arena_is_arenas_and_an_unresolvable_path_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "linked.py"
    link.symlink_to(Path(arena.__file__).resolve().parent / "core.py")
    assert events._is_internal(str(link)) is True
    assert events._is_internal(str(tmp_path / "user.py")) is False

    class _Unresolvable(type(Path())):  # type: ignore[misc]
        def resolve(self, strict: bool = False) -> Path:
            raise OSError("no such mount")

    monkeypatch.setattr(events, "Path", _Unresolvable)
    assert events._is_internal(str(tmp_path / "elsewhere.py")) is False


def test_a_warning_names_the_users_line_when_no_file_was_resolved_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The internal folders are kept: a mutation run adds its own there.
    monkeypatch.setattr(events, "_INTERNAL_FILES", {})
    with pytest.warns(ArenaWarning, match="from the test") as caught:
        line = _line() + 1
        events.warn_user("from the test")
    assert caught[0].filename == __file__ and caught[0].lineno == line


def test_debug_mode_prints_its_lines_where_no_logging_is_configured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ARENA_DEBUG`` with no handler anywhere: a stderr handler is attached and the
    line is the prefix and the message, nothing else; without debug the line goes to
    DEBUG (Round 11: ``log_event``'s format, handler and level)."""
    monkeypatch.setattr(events.logger, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    level = events.logger.level
    try:
        events.log_event("grew slot (0, 0)", debug=True)
        assert capsys.readouterr().err == "[arena] grew slot (0, 0)\n"
        assert events.logger.level == logging.INFO
        events.log_event("quiet", debug=False)  # DEBUG: below the level just set
        assert capsys.readouterr().err == ""
    finally:
        events.logger.setLevel(level)


def test_without_debug_mode_the_line_goes_to_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="arena"):
        events.log_event("grew", debug=False, prefix="[x]")
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG and record.getMessage() == "[x] grew"


def test_the_request_log_keeps_each_sites_peak_and_each_slots_last_request() -> None:
    """A large request then a small one from one line: the site's peak is the large one,
    keyed by the test's own line (Round 11: ``RequestLog.note`` #3 skipped one frame too
    many, #12 kept the last size)."""
    with Arena("cpu", framework="numpy") as ws:
        line = _line() + 2
        for n in (4096, 64):
            ws.numpy.get_simultaneous(((n,), "float32"))
        name = test_the_request_log_keeps_each_sites_peak_and_each_slots_last_request.__name__
        site = f"test_caller_info.py:{line}:{name}"
        assert ws.stats().call_sites == {site: 4096 * 4}
