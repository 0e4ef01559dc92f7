"""Locks that survive ``os.fork()``.

A child process gets a copy of every lock in the state it had at the fork; a lock another
thread held then is held forever in the child, whose first request would hang. Every
object of arena that owns a lock registers a reset with :func:`after_fork`; in a child,
each reset runs before the child's code resumes and gives its owner fresh locks (and
forgets threads that do not exist in the child). State a parent thread was changing at
the fork is as it was: a growth cut short leaves a slot without memory, which its next
request grows again.

CUDA does not survive a fork: a child can use host arenas, not device memory.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork"]

_T = TypeVar("_T")

#: Owner -> its resets; weak, so a registration never keeps an arena alive.
_RESETS: weakref.WeakKeyDictionary[Any, list[Callable[[Any], None]]] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def after_fork(owner: _T, reset: Callable[[_T], None]) -> None:
    """Run ``reset(owner)`` in the child after every ``os.fork()``, while ``owner`` lives.

    ``reset`` must not take any lock it does not create itself.
    """
    with _GUARD:
        _RESETS.setdefault(owner, []).append(reset)


def _reset_in_child() -> None:
    global _GUARD
    _GUARD = threading.Lock()
    for owner, resets in list(_RESETS.items()):
        for reset in resets:
            reset(owner)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_in_child)
