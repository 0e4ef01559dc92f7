"""Ranks that agree before lock: :meth:`arena.Arena.sync` over a group of ranks.

:mod:`~arena.distributed.groups` wraps the engines' collectives, :mod:`~arena.distributed.wire`
runs the hang-free exchange, :mod:`~arena.distributed.state` says what a rank contributes
and takes the maxima back. ``docs/distributed.md`` has the recipes and the measured cost.
"""

from __future__ import annotations

from arena.distributed.groups import JaxProcessGroup, SyncGroup, TorchGroup, as_group
from arena.distributed.state import SyncReport
from arena.distributed.sync import sync_table

__all__ = ["JaxProcessGroup", "SyncGroup", "SyncReport", "TorchGroup", "as_group", "sync_table"]
