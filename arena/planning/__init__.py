"""Planning: byte offsets for blocks with known lifetimes in one shared buffer.

See :mod:`arena.planning.offsets` for the algorithm and its guarantees.
"""

from __future__ import annotations

from arena.planning.offsets import STRATEGIES, OffsetPlan, plan_offsets

__all__ = ["STRATEGIES", "OffsetPlan", "plan_offsets"]
