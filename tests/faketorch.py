"""A ``torch.empty`` that hands out host tensors whatever device it is asked for, so the
arena's CUDA code paths over torch (the torch source, the empty allocation) run on
machines without a GPU. Shared by tests/memory/test_torch_cuda_without_cupy.py's
``torch_only_gpu`` fixture and tests/memory/test_sources_gaps12.py.
"""

from __future__ import annotations

from typing import Any

import pytest


def host_torch_empty(monkeypatch: pytest.MonkeyPatch, torch: Any) -> list[Any]:
    """Replace ``torch.empty`` (for the test, through ``monkeypatch``) with one that
    records the ``device`` it was given and returns a host tensor; returns the list of
    the devices asked for, in order."""
    asked: list[Any] = []
    real_empty = torch.empty

    def empty(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        asked.append(device)
        return real_empty(*args, **kwargs)  # host memory standing in for the device's

    monkeypatch.setattr(torch, "empty", empty)
    return asked
