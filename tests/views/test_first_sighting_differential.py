"""A structure's first sighting placed from the request and planned at its second
(``ViewBuilder.later``): both hit paths agree on a stream that repeats a few structures at
growing and shrinking sizes through the arena's own (bound) methods, and the views of one
request never overlap."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.views import hit
from tests.conftest import need_compiled_hit

DTYPES = ["float32", "int8", "float64", "uint16"]


def _structures(rng: random.Random) -> list[list[tuple[int, str]]]:
    """A few structures: per view its rank and dtype."""
    return [
        [(rng.randint(0, 3), rng.choice(DTYPES)) for _ in range(rng.randint(1, 4))]
        for _ in range(4)
    ]


def _request(rng: random.Random, structure: list[tuple[int, str]]) -> tuple[Any, ...]:
    scale = rng.choice([1, 2, 7, 64, 300])
    return tuple(
        (tuple(rng.randint(0, scale) for _ in range(rank)), dtype) for rank, dtype in structure
    )


def _run(path: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(hit, "HIT_PATH", path)
    rng = random.Random(seed)
    structures = _structures(rng)
    record: list[Any] = []
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(120):
            roll = rng.random()
            if roll < 0.05:
                ws.lock() if not ws.is_locked else ws.unlock()
                record.append(("locked", ws.is_locked))
                continue
            specs = _request(rng, rng.choice(structures))
            serve = ws.try_get_simultaneous if roll < 0.2 else ws.get_simultaneous
            try:
                views = serve(*specs)
            except Exception as error:  # the outcome compared between paths
                record.append(("error", type(error).__name__, str(error)))
                continue
            if views is None:
                record.append(None)
                continue
            base = ws.numpy._select().buffer.allocation
            start = base.ptr if base is not None else 0
            spans = []
            out = []
            for view, (shape, dtype) in zip(views, specs, strict=True):
                assert view.shape == shape and view.dtype == np.dtype(dtype)
                assert view.flags.c_contiguous and view.flags.writeable
                ptr = view.ctypes.data
                if view.nbytes:
                    spans.append((ptr, ptr + view.nbytes))
                    assert base is not None and start <= ptr
                    assert ptr + view.nbytes <= start + base.nbytes
                out.append((ptr - start if view.nbytes else None, view.strides))
            spans.sort()
            for (_, end), (begin, _) in itertools.pairwise(spans):
                assert end <= begin, f"views of one request overlap: {spans}"
            record.append(("ok", out))
        record.append(("capacity", [s.capacity for s in ws.stats().slots]))
    return record


@pytest.mark.parametrize("seed", range(6))
def test_first_and_second_sightings_agree_on_both_paths(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_compiled_hit()
    python = _run("python", seed, monkeypatch)
    compiled = _run("compiled", seed, monkeypatch)
    for index, (p, c) in enumerate(zip(python, compiled, strict=True)):
        assert p == c, f"seed {seed}, step {index}"
