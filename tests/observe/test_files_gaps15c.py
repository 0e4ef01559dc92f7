"""Round 15c (issue 26 item 12): what a fresh draw of ``arena/observe/files.py`` (after
:func:`~arena.observe.files.exclusive` began to note its lock descriptors for forked
children) found the suite let through."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from arena.observe import files


def test_a_second_interrupt_in_the_cleanup_of_a_lost_descriptor_still_ends_as_the_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C twice, simulated as in tests/observe/test_hostile41_files.py: the first
    interrupt lands as ``os.open`` returns (the descriptor never stored, nor noted for
    forked children), the second as the cleanup's ``os.fstat`` of the file it opens
    again returns (before that descriptor is noted). The cleanup closes the descriptor
    and forgets a note that was never made: the call ends with the KeyboardInterrupt, not
    a KeyError of the missing note (kills ``exclusive`` #81, ``_OPEN.pop(descriptor)``
    without its default), and the next writer takes the lock file left behind."""
    lock = tmp_path / "p.json.lock"
    real_open, real_fstat = os.open, os.fstat
    opened: list[int] = []
    shots = {"open": 0, "fstat": 0}

    def interrupted_open(path: Any, flags: int, *args: Any) -> int:
        descriptor = real_open(path, flags, *args)
        if os.fspath(path) == os.fspath(lock):
            if shots["open"] == 0:
                shots["open"] += 1
                os.close(descriptor)  # the real race leaks it; the test keeps its descriptors
                raise KeyboardInterrupt("at os.open's return")
            opened.append(descriptor)
        return descriptor

    def interrupted_fstat(descriptor: int) -> os.stat_result:
        info = real_fstat(descriptor)
        if descriptor in opened and shots["fstat"] == 0:
            shots["fstat"] += 1
            raise KeyboardInterrupt("at os.fstat's return, in the cleanup")
        return info

    monkeypatch.setattr(os, "open", interrupted_open)
    monkeypatch.setattr(os, "fstat", interrupted_fstat)
    with pytest.raises(KeyboardInterrupt, match="in the cleanup"):
        files.exclusive(lock, lambda: None)
    monkeypatch.setattr(os, "fstat", real_fstat)
    monkeypatch.setattr(os, "open", real_open)
    assert shots == {"open": 1, "fstat": 1} and len(opened) == 1
    with pytest.raises(OSError):  # closed by the cleanup
        os.fstat(opened[0])
    assert files.exclusive(lock, lambda: 7) == 7  # the lock file, if left, is free
    assert not lock.exists()
