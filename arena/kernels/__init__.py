"""Workspaces for kernel libraries: Triton's allocator, library workspaces (FlashInfer-style
buffers a library holds across calls), budgets and memory statistics.

* each slot's keyed, growable blocks (never inside the scratch buffer), shared by library
  workspaces and Triton blocks, are a store each slot gets from that feature's lock hook:
  :mod:`arena.slots.workspaces`;
* :mod:`arena.kernels.library`: :meth:`arena.Arena.get_library_workspace`;
* :mod:`arena.kernels.triton`: :meth:`arena.Arena.triton_allocator`;
* :mod:`arena.kernels.budget`: :func:`layout_bytes`, :meth:`arena.Arena.planned_bytes`;
* :mod:`arena.kernels.memstats`: :meth:`arena.Arena.memory_stats` under torch's key names,
  agreeing with :meth:`arena.Arena.memory_snapshot` by torch's consistency rules.

``docs/kernel-libraries.md`` shows them at work. The package's ``__init__`` imports none of
its modules; they import only the layers below them (docs/architecture.md).
"""

from __future__ import annotations

__all__: list[str] = []
