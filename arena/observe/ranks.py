"""Which rank of a distributed job this process is, and how many ranks there are, for the
profile (:mod:`arena.observe.profile`): torch.distributed's figures when it is imported
and initialised (never imported here), else the launcher's ``RANK`` and ``WORLD_SIZE``."""

from __future__ import annotations

import os
import sys

__all__ = ["process_rank", "world_size"]


def process_rank() -> int:
    """This process's rank: torch.distributed's when initialised, else ``RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except (RuntimeError, ValueError):
            pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def world_size() -> int:
    """The number of ranks: torch.distributed's world size when initialised, else
    ``WORLD_SIZE``, else 1."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return max(1, int(dist.get_world_size()))
        except (RuntimeError, ValueError):
            pass
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1
