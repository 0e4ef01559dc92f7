"""caller_info: the first frame outside arena, walked from ``skip`` frames up; a stack
with fewer frames than that (a call from C at the bottom of a stack: an atexit handler)
names no caller rather than raising."""

from __future__ import annotations

import sys

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
