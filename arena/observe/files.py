"""Files the arena reads and writes on the user's behalf: profiles and event logs.

A path may name anything: a FIFO, ``/dev/zero``, a directory, a symlink. These helpers
never block on one (``O_NONBLOCK``), read or append only regular files (checked with
``fstat`` on the opened descriptor, so a file swapped in meanwhile is caught), read at
most a stated number of bytes, and take a lock file that they remove when done.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

from arena.errors import ArenaError

__all__ = [
    "FileRefused",
    "exclusive",
    "file_kind",
    "open_append",
    "read_regular",
    "refuse_special",
]

T = TypeVar("T")

_NONBLOCK = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)

#: The lock files' descriptors :func:`exclusive` has open: descriptor -> (st_dev, st_ino,
#: thread). A ``flock`` belongs to the open file, which a child of ``os.fork()`` shares
#: through its copy of the descriptor: a child keeping the copy of another thread's
#: (a thread that never runs there) would hold that lock for its whole life after the
#: parent let go, and a writer in the child that found the lock file would wait on it
#: for good. The child closes those copies (:func:`_close_in_child`). An entry a signal
#: left behind (at the close's return, before its removal) names a number that may have
#: been reused since: the child closes a descriptor only where it is still that file.
_OPEN: dict[int, tuple[int, int, int]] = {}


class FileRefused(ArenaError, OSError):
    """A path that is not a regular file, or a file larger than the caller reads."""


def file_kind(mode: int) -> str:
    """``"a FIFO"``, ``"a character device"``, ... for an ``st_mode``."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    )
    for test, name in kinds:
        if test(mode):
            return name
    return "not a regular file"


def _regular(info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(f"it is {file_kind(info.st_mode)}, not a regular file")


def refuse_special(path: str | os.PathLike[str]) -> None:
    """Raise :class:`FileRefused` when ``path`` exists and is not a regular file.

    Checked before opening, so that nothing opens a device; the opened descriptor is
    checked again (the path may change in between).
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    _regular(info)


def read_regular(path: str | os.PathLike[str], limit: int, limit_name: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises
    ------
    FileNotFoundError
        If there is no file.
    FileRefused
        If it is not a regular file, or holds more than ``limit`` bytes (``limit_name``
        names the bound in the message).
    OSError
        If it cannot be opened or read.
    """
    refuse_special(path)
    descriptor = os.open(path, os.O_RDONLY | _NONBLOCK)
    try:
        info = os.fstat(descriptor)
        _regular(info)
        too_large = FileRefused(f"it holds more than {limit_name} ({limit} bytes)")
        if info.st_size > limit:
            raise too_large
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(descriptor, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while read
                raise too_large
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def open_append(path: str | os.PathLike[str]) -> int:
    """A descriptor appending to the regular file ``path`` (created when missing).

    Raises
    ------
    FileRefused
        If ``path`` is not a regular file (a FIFO without a reader fails to open instead
        of blocking: ``OSError`` ``ENXIO``).
    OSError
        If it cannot be opened.
    """
    refuse_special(path)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NONBLOCK, 0o666)
    try:
        _regular(os.fstat(descriptor))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def exclusive(  # noqa: PLR0915 (no call out of the frame in the cleanup: see below)
    path: str | os.PathLike[str], action: Callable[[], T]
) -> T:
    """Return ``action()``, called with an exclusive ``flock`` held on the lock file
    ``path``; the lock file is removed when done, however the call ends.

    The lock file exists only while a writer holds it. Removing it is safe because every
    holder checks, once it has the lock, that ``path`` still names the file it locked: a
    writer that waited on a file the previous holder removed (or that another writer has
    since replaced by a new one) lets go and locks the file ``path`` names now. Only a
    holder removes the file, while it still holds the lock, and only while ``path`` still
    names the file it locked. Where ``fcntl`` is missing
    (not POSIX) there is no lock.

    Made for interrupts (a ``KeyboardInterrupt`` from a signal, at any call or return):
    from the lock file's creation to its removal and the descriptor's close this frame
    calls no Python code outside the ``try`` whose ``finally`` removes and closes (plain
    ``os`` and ``fcntl`` calls), so no interrupt leaves the descriptor open (its lock held
    for the rest of the process: a context manager made of a generator lost both when an
    interrupt landed at its ``yield``) or the file behind. One interrupted while waiting
    for the lock removes the file if it then takes the lock at once (another writer that
    holds it removes it when done); one interrupted as ``os.open`` returns (the
    descriptor not yet stored) opens the file again and removes it where no one holds it
    (the descriptor that os.open returned stays open, never locked: nothing waits on it).
    A second interrupt while the cleanup of the first runs still closes the descriptor,
    releasing its lock; the lock file may then stay, free, for the next writer to take
    and remove. A child of ``os.fork()`` closes its copies of the descriptors other
    threads of the parent held here (:data:`_OPEN`), so their locks go with the parent's
    writers.

    Raises
    ------
    FileRefused
        If ``path`` is something other than a regular file.
    OSError
        If the lock file cannot be created.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: the caller's atomic replace only
        return action()
    descriptor, locked, opening = -1, False, False
    try:
        while True:
            refuse_special(path)  # nothing open here (-1): an interrupt leaves nothing
            opening = True
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | _NONBLOCK, 0o666)
            opening = False
            held = os.fstat(descriptor)
            _OPEN[descriptor] = (held.st_dev, held.st_ino, threading.get_ident())  # before flock
            _regular(held)  # inside the try: an interrupt there closes the descriptor
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                now: os.stat_result | None = os.stat(path)
            except FileNotFoundError:
                now = None  # removed by the holder we waited for
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                break
            # A newer lock file took its place (or none is there): let go of this one.
            # The number is cleared before the close: a signal handled as os.close returns
            # must not leave the finally a closed number to close again (EBADF in place of
            # the interrupt, or another thread's file opened under that number since).
            stale, descriptor = descriptor, -1
            os.close(stale)
            _OPEN.pop(stale, None)
        locked = True
        return action()
    finally:
        try:
            if opening and descriptor < 0:
                # Stopped at os.open: a signal handled as it returned (before the store) loses
                # the descriptor of the file it may have created. Opened again, never created,
                # the file is removed below where it is free: a lock file no one holds is no
                # writer's (each checks, once it holds the lock, that the path still names it).
                try:
                    descriptor = os.open(path, os.O_RDWR | _NONBLOCK)
                except OSError:  # gone, or not ours to open
                    pass
            if descriptor >= 0:
                if not locked:  # stopped while waiting: remove it only as its holder
                    try:
                        mine = os.fstat(descriptor)
                        _OPEN[descriptor] = (mine.st_dev, mine.st_ino, threading.get_ident())
                        if stat.S_ISREG(mine.st_mode):  # never a FIFO or device put there
                            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            now = os.stat(path)
                            locked = (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
                    except OSError:  # held by another writer (or gone): it removes its own
                        pass
                if locked:
                    # Removed only while the path still names the file this holder locked: a
                    # file put in its place meanwhile (the lock file deleted by hand, and a
                    # new writer's made and locked) is that writer's to remove.
                    try:  # a read-only directory keeps it
                        ours, there = os.fstat(descriptor), os.stat(path)
                        if (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino):
                            os.unlink(path)
                    except OSError:
                        pass
        finally:
            # Closed even where a second interrupt (a signal while the first one's cleanup
            # runs: Ctrl-C pressed twice) stops the lines above: a descriptor left open holds
            # its flock for the rest of the process, and every writer waits on it for good,
            # this process too (its next lock is on another descriptor). At worst the lock
            # file stays, which the next writer locks and removes.
            if descriptor >= 0:
                os.close(descriptor)  # releases the flock, after the unlink
                _OPEN.pop(descriptor, None)


def _close_in_child() -> None:
    """In a child after ``os.fork()``: close the copies of the lock files' descriptors
    the parent's other threads had open in :func:`exclusive` (see :data:`_OPEN`); those
    threads never run here, and each copy would keep its lock held after the parent let
    go. The forking thread's own, if any, stay: it goes on here and closes them."""
    me = threading.get_ident()
    for descriptor, (device, inode, thread) in list(_OPEN.items()):
        if thread == me:
            continue
        del _OPEN[descriptor]
        try:
            now = os.fstat(descriptor)
            if (now.st_dev, now.st_ino) == (device, inode):
                os.close(descriptor)
        except OSError:  # closed since (an entry a signal left behind)
            pass


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_close_in_child)
