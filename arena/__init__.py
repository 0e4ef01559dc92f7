"""arena: a framework-agnostic GPU workspace allocator.

One preallocated byte buffer per slot, carved into aligned, zero-copy, typed views; it
grows during warm-up and is then locked, so the hot path allocates nothing and pointers
never move. Views are available as NumPy arrays, torch tensors, CuPy arrays and JAX
arrays over the same bytes.

``import arena`` imports no framework: adapters import theirs when first used.
"""

from __future__ import annotations

from arena._version import __version__
from arena.base.dtypes import DType, resolve_dtype
from arena.base.events import ArenaEvent
from arena.base.layout import Layout, ViewLayout, compute_layout
from arena.core import FRAMEWORKS, Arena
from arena.distributed import JaxProcessGroup, SyncGroup, SyncReport
from arena.errors import (
    ArenaAsleepError,
    ArenaClosedError,
    ArenaError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ArenaSyncError,
    ArenaWarning,
    BlockActiveError,
    ConfigError,
    DeviceError,
    DeviceUnavailableError,
    DTypeError,
    FrameworkUnavailableError,
    GraphCaptureError,
    NotInitializedError,
    PersistentMismatchError,
    SlotError,
    SpecError,
    TracedRequestError,
)
from arena.front import Front
from arena.kernels.budget import layout_bytes
from arena.kernels.triton import TritonAllocator
from arena.memory.devices import CPU, Device, default_device, parse_device
from arena.memory.rmm import RmmSource
from arena.memory.sources import Allocation, HostSource, MemorySource
from arena.observe.stats import ArenaStats, SlotStats
from arena.planning.offsets import OffsetPlan, plan_offsets
from arena.planning.scopes import Scope
from arena.planning.steps import Step
from arena.process import (
    current_arena,
    init_arena,
    is_arena_initialized,
    lock_arena,
    reset_arena,
    unlock_arena,
)

__all__ = [
    "CPU",
    "FRAMEWORKS",
    "Allocation",
    "Arena",
    "ArenaAsleepError",
    "ArenaClosedError",
    "ArenaError",
    "ArenaEvent",
    "ArenaLockedError",
    "ArenaOutOfMemoryError",
    "ArenaStats",
    "ArenaSyncError",
    "ArenaWarning",
    "BlockActiveError",
    "ConfigError",
    "DType",
    "DTypeError",
    "Device",
    "DeviceError",
    "DeviceUnavailableError",
    "FrameworkUnavailableError",
    "Front",
    "GraphCaptureError",
    "HostSource",
    "JaxProcessGroup",
    "Layout",
    "MemorySource",
    "NotInitializedError",
    "OffsetPlan",
    "PersistentMismatchError",
    "RmmSource",
    "Scope",
    "SlotError",
    "SlotStats",
    "SpecError",
    "Step",
    "SyncGroup",
    "SyncReport",
    "TracedRequestError",
    "TritonAllocator",
    "ViewLayout",
    "__version__",
    "compute_layout",
    "current_arena",
    "default_device",
    "init_arena",
    "is_arena_initialized",
    "layout_bytes",
    "lock_arena",
    "parse_device",
    "plan_offsets",
    "reset_arena",
    "resolve_dtype",
    "unlock_arena",
]
