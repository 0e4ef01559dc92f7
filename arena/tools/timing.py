"""The bench's timing harness: paired rounds and the spread of their ratios.

A machine shared with other work runs fast and slow by turns. Timing one method for a
while and its baseline a while later compares two different machines; timing them back to
back, round after round, compares each pair on the same one. Every ratio the bench
reports is therefore the **median of per-round ratios** (each round: the method, then its
baseline, over the same inputs; the order alternates between rounds so that neither
always runs second), with the 10th and 90th percentiles of those ratios as its spread.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Paired", "figure_spread", "paired", "quantile", "ratios", "spread"]


@dataclass(frozen=True)
class Paired:
    """Per-round ratios of two methods timed back to back.

    Attributes
    ----------
    median : float
        The median of the per-round ratios (top / bottom).
    p10, p90 : float
        Their 10th and 90th percentiles: the spread.
    top_us, bottom_us : float
        The median microseconds per step of each method.
    rounds : int
        How many rounds were paired.
    """

    median: float
    p10: float
    p90: float
    top_us: float
    bottom_us: float
    rounds: int

    def record(self) -> dict[str, Any]:
        """The figures as a JSON record (ratio, p10, p90, both medians, rounds)."""
        return {
            "ratio": self.median,
            "p10": self.p10,
            "p90": self.p90,
            "us": self.top_us,
            "baseline_us": self.bottom_us,
            "rounds": self.rounds,
        }

    def __str__(self) -> str:
        return spread(self.median, self.p10, self.p90)


def spread(median: float, p10: float, p90: float) -> str:
    """A figure as the bench prints it: ``0.33 (0.31 to 0.35)``, the median and its 10th to
    90th percentiles, three significant digits. "to", not a dash: a difference of two
    timings can be negative under noise, and ``-0.151-0.125`` reads as a subtraction."""
    return f"{median:.3g} ({p10:.3g} to {p90:.3g})"


def figure_spread(figure: Mapping[str, float]) -> str:
    """:func:`spread` of a figure as the bench's JSON keeps it (``median``, ``p10``, ``p90``)."""
    return spread(figure["median"], figure["p10"], figure["p90"])


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation (``q`` in 0..1)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ratios(top: Sequence[float], bottom: Sequence[float]) -> Paired:
    """:class:`Paired` from per-round times of two methods (round ``i`` of each paired)."""
    per_round = [t / b for t, b in zip(top, bottom, strict=True)]
    return Paired(
        statistics.median(per_round),
        quantile(per_round, 0.1),
        quantile(per_round, 0.9),
        statistics.median(top),
        statistics.median(bottom),
        len(per_round),
    )


def paired(
    top: Callable[[Any], Any],
    bottom: Callable[[Any], Any],
    inputs: Sequence[Any],
    rounds: int,
) -> Paired:
    """Time ``top`` and ``bottom`` over every item of ``inputs``, back to back, ``rounds``
    times (after one untimed pass of each), with the collector paused.

    Returns
    -------
    Paired
        ``top / bottom``; the times are microseconds per item.
    """
    for item in inputs:
        top(item)
        bottom(item)
    times: tuple[list[float], list[float]] = ([], [])
    enabled = gc.isenabled()
    gc.disable()
    try:
        for index in range(rounds):
            order = ((0, top), (1, bottom)) if index % 2 == 0 else ((1, bottom), (0, top))
            for which, method in order:
                start = time.perf_counter()
                for item in inputs:
                    method(item)
                times[which].append((time.perf_counter() - start) / len(inputs) * 1e6)
    finally:
        if enabled:
            gc.enable()
    return ratios(*times)
