"""The bench's baseline for a locked request is the framework's own ``empty`` in its
cheapest spelling: on the CPU ``torch.empty((4, 16), ...)`` cost about 1.5 us where
``torch.empty(4, 16, ...)`` cost 0.85, and ``np.empty((4, 16), "float32")`` 0.16 us where
a ``numpy.dtype`` cost 0.13; the slower spellings made ``plain_over_empty`` 0.23 for
torch and 0.92 for NumPy where it is 0.34 and 1.15."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena.tools.regionbench import region_figures


def _recording(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[Any, ...]]:
    real = module.empty
    calls: list[tuple[Any, ...]] = []

    def empty(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "empty", empty)
    return calls


def test_numpys_empty_is_given_a_dtype_not_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recording(monkeypatch, np)
    figures = region_figures(quick=True)
    assert figures["numpy"]["-"]["empty_us"] > 0
    timed = [args for args in calls if args[:1] == ((4, 16),)]
    assert timed, calls[:5]
    assert all(isinstance(args[1], np.dtype) for args in timed), timed[:3]


def test_torchs_empty_is_given_the_sizes_as_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    calls = _recording(monkeypatch, torch)
    figures = region_figures(quick=True)
    assert figures["torch"]["grad"]["empty_us"] > 0
    assert (4, 16) in calls
    assert ((4, 16),) not in calls
