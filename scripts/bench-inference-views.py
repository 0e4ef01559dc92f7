"""The decoder pass's arithmetic on the views of ``ws.torch`` and of the inference front,
under ``torch.inference_mode()``, with no arena call in the timed passes.

    python scripts/bench-inference-views.py [--rounds 101] [--reps 20]

Inside one arena living in the mode (warm-up included, as an engine runs), each front
runs the bench's steps pass (:mod:`arena.tools.passbench`) until it replays, then one run
of the step records every view it hands out. The timed passes then run the same
arithmetic on ``t.data`` of each kept view per use (as the front's replay hands out fresh
views), so only the kind of tensor differs: normal tensors from ``ws.torch``, inference
tensors from ``ws.front("torch", inference=True)``. Also timed in the same rounds: the
floor (``torch.empty`` tensors made once inside the mode, inference tensors) and each
front's replayed steps pass. Prints ``uptime`` before and after, each pass's median
microseconds and its median ratio of paired rounds to the floor with the p10-p90 spread,
and the two fronts' ratios to each other (docs/performance.md, "Inference tensors").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from arena import Arena
from arena.tools import passbench
from arena.tools.decoder import DOCS_LAYERS
from arena.tools.timing import quantile


def _uptime() -> str:
    return subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()


class _KeepingStep:
    """A run of a step that keeps every view it hands out."""

    def __init__(self, step: Any, kept: list[Any]) -> None:
        self.step, self.kept, self.run = step, kept, None

    def __enter__(self) -> _KeepingStep:
        self.run = self.step.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.step.__exit__(*exc)

    def get_simultaneous(self, *specs: Any) -> Any:
        views = self.run.get_simultaneous(*specs)  # type: ignore[attr-defined]
        self.kept.extend(views)
        return views

    def release(self, *views: Any) -> Any:
        return self.run.release(*views)  # type: ignore[attr-defined]


class _Keeping:
    """A front whose steps keep every view they hand out."""

    def __init__(self, front: Any, kept: list[Any]) -> None:
        self.front, self.kept = front, kept

    def step(self, key: Any) -> _KeepingStep:
        return _KeepingStep(self.front.step(key), self.kept)


def _kept_views(front: Any) -> list[Any]:
    """The views one replayed run of the bench's step hands out, in request order."""
    kept: list[Any] = []
    keeping = _Keeping(front, kept)
    passbench.make_passes("torch", keeping, DOCS_LAYERS, passbench.TOKENS)["steps"]()
    return kept


def _on_kept(front: Any, kept: list[Any]) -> Callable[[], Any]:
    """The floor pass of ``front``'s bench passes, run on ``t.data`` of the kept views."""
    passes = passbench.make_passes("torch", front, DOCS_LAYERS, passbench.TOKENS)
    views = passes["views"]
    held = views.__closure__[views.__code__.co_freevars.index("held")].cell_contents  # type: ignore[index]
    assert len(held) == len(kept), (len(held), len(kept))
    held[:] = kept
    return views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(_uptime())
    with Arena("cpu", framework="torch") as ws, torch.inference_mode():
        fronts = {"default": ws.torch, "inference": ws.front("torch", inference=True)}
        passes: dict[str, Callable[[], Any]] = {}
        for name, front in fronts.items():
            made = passbench.make_passes("torch", front, DOCS_LAYERS, passbench.TOKENS)
            for _ in range(3):  # records, plans, replays (and remembers)
                made["steps"]()
            passes.setdefault("floor", made["floor"])
            passes[f"{name}_steps"] = made["steps"]
        ws.lock()
        for name, front in fronts.items():
            kept = _kept_views(front)
            kinds = {torch.is_inference(v) for v in kept}
            print(f"{name} front: {len(kept)} views kept, inference tensors: {kinds}")
            passes[f"{name}_kept"] = _on_kept(front, kept)
        times = passbench._timed(passes, args.rounds, args.reps)
    print(_uptime())

    def ratio(top: str, bottom: str) -> str:
        r = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
        low, high = quantile(r, 0.1), quantile(r, 0.9)
        return f"{statistics.median(r):.3f} ({low:.3f}-{high:.3f})"

    for name, values in times.items():
        print(f"{name:18} {statistics.median(values):8.1f} us   / floor {ratio(name, 'floor')}")
    print(f"inference_kept / default_kept   {ratio('inference_kept', 'default_kept')}")
    print(f"inference_steps / default_steps {ratio('inference_steps', 'default_steps')}")


if __name__ == "__main__":
    main()
