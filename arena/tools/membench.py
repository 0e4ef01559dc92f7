"""The bench's fixed-address figures (``source="virtual"``, docs/memory.md): what growth
costs against the default host source, and sleep / wake time per GiB.

Growth: each round makes one arena per source and grows its slot through the same sizes
(doubling), writing every view once, as a warm-up writes its activations; the two
sources alternate first place round by round, and the figure is the median of the
per-round ratios (virtual / default) with its p10-p90 spread. Sleep and wake: a slot of
``size`` bytes, every byte written, then ``sleep(level=1)`` and ``wake()`` timed, and
the same with a persistent buffer of the same size that level 1 copies out and back.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

__all__ = ["fixed_address_figures", "format_fixed_address"]

GiB = 1 << 30
MiB = 1 << 20


def _grow(source: str, sizes: list[int]) -> float:
    """Seconds to grow one slot through ``sizes`` (each view written once)."""
    from arena.core import Arena

    with Arena("cpu", source=source, max_bytes=sizes[-1], framework="numpy") as arena:
        start = time.perf_counter()
        for size in sizes:
            (view,) = arena.numpy.get_simultaneous(((size,), "uint8"))
            view.fill(1)
        return time.perf_counter() - start


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _sleep_wake(size: int, rounds: int, persistent: bool) -> tuple[float, float]:
    """Median seconds of ``sleep(level=1)`` and ``wake()`` over ``size`` bytes of scratch
    (or of a persistent buffer, which level 1 copies out and back)."""
    from arena.core import Arena

    sleeps: list[float] = []
    wakes: list[float] = []
    with Arena("cpu", source="virtual", max_bytes=2 * size, framework="numpy") as arena:
        for _ in range(rounds):
            if persistent:
                view = arena.numpy.get_persistent("kept", (size,), "uint8")
            else:
                (view,) = arena.numpy.get_simultaneous(((size,), "uint8"))
            view.fill(2)  # every page resident
            del view
            start = time.perf_counter()
            arena.sleep(level=1)
            middle = time.perf_counter()
            arena.wake()
            sleeps.append(middle - start)
            wakes.append(time.perf_counter() - middle)
    return statistics.median(sleeps), statistics.median(wakes)


def fixed_address_figures(quick: bool) -> dict[str, Any]:
    """Growth cost and sleep / wake per GiB on the host (empty where not Linux)."""
    if not sys.platform.startswith("linux"):
        return {}
    top = 32 * MiB if quick else 512 * MiB
    sizes = [MiB << k for k in range((top // MiB).bit_length())]
    rounds = 5 if quick else 15
    ratios: list[float] = []
    virtual: list[float] = []
    host: list[float] = []
    for r in range(rounds):
        if r % 2:
            a, b = _grow("host", sizes), _grow("virtual", sizes)
        else:
            b, a = _grow("virtual", sizes), _grow("host", sizes)
        host.append(a)
        virtual.append(b)
        ratios.append(b / a)
    size = 128 * MiB if quick else GiB
    scratch = _sleep_wake(size, 3 if quick else 7, persistent=False)
    kept = _sleep_wake(size, 3 if quick else 7, persistent=True)
    per_gib = GiB / size
    return {
        "growth_sizes": [sizes[0], sizes[-1]],
        "growth_virtual_ms": statistics.median(virtual) * 1e3,
        "growth_host_ms": statistics.median(host) * 1e3,
        "growth_ratio": statistics.median(ratios),
        "growth_ratio_p10": _quantile(ratios, 0.1),
        "growth_ratio_p90": _quantile(ratios, 0.9),
        "bytes": size,
        "sleep_ms_per_gib": scratch[0] * 1e3 * per_gib,
        "wake_ms_per_gib": scratch[1] * 1e3 * per_gib,
        "sleep_kept_ms_per_gib": kept[0] * 1e3 * per_gib,
        "wake_kept_ms_per_gib": kept[1] * 1e3 * per_gib,
    }


def format_fixed_address(figures: dict[str, Any]) -> list[str]:
    """Lines for people (none when nothing was measured)."""
    if not figures:
        return []
    low, high = figures["growth_sizes"]
    return [
        "",
        f"fixed-address memory (source='virtual', host): growth {low // MiB} -> "
        f"{high // MiB} MiB doubling, each view written once: {figures['growth_virtual_ms']:.1f}"
        f" ms virtual, {figures['growth_host_ms']:.1f} ms default source, virtual / default "
        f"{figures['growth_ratio']:.2f} ({figures['growth_ratio_p10']:.2f}-"
        f"{figures['growth_ratio_p90']:.2f})",
        f"  sleep(level=1) / wake() per GiB, measured on {figures['bytes'] // MiB} MiB: scratch "
        f"{figures['sleep_ms_per_gib']:.1f} / {figures['wake_ms_per_gib']:.1f} ms; persistent "
        f"(copied out and back) {figures['sleep_kept_ms_per_gib']:.1f} / "
        f"{figures['wake_kept_ms_per_gib']:.1f} ms",
    ]
