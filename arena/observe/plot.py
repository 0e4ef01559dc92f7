"""The report's picture (matplotlib, Agg backend; ``pip install matplotlib``).

Top: the peak demand of every call site, grouped by slot; the call site that sizes the
slot is drawn in colour, the others in grey, and a dashed line marks the slot's capacity.
Middle: capacity against LOAD per slot (and the planned need where steps were planned),
each bar labelled with its ratio to LOAD. Bottom: the capacity of every slot over the
warm-up, each step labelled with the call site that caused it.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from arena.base.events import MB

__all__ = ["plot_report"]

_SIZING = "#d62728"
_OTHER = "#9aa5b1"
_LINES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]


def plot_report(report: dict[str, Any], path: str) -> None:
    """Draw ``report`` (from :func:`arena.observe.report.analyse`) into the PNG file ``path``."""
    sites = report["sites"]
    slots = report["slots"]
    rows = max(1, len(sites) + len(slots))
    bars = 0.9 + 0.75 * len(slots)
    fig, (top, middle, bottom) = plt.subplots(
        3,
        1,
        figsize=(11, 2.6 + 0.42 * rows + bars + 3.4),
        gridspec_kw={"height_ratios": [0.9 + 0.42 * rows, bars, 3.4]},
    )
    _demand(top, slots, sites)
    _against_load(middle, slots)
    _timeline(bottom, report)
    title = (
        f"arena profile: {report['device']}, {report['ubatches']} ubatches x "
        f"{report['lanes']} lanes, {report['runs']} run(s)"
    )
    fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _demand(ax: Any, slots: list[dict[str, Any]], sites: list[dict[str, Any]]) -> None:
    labels: list[str] = []
    y = 0.0
    biggest = max([1, *(s["capacity"] for s in slots), *(r["peak"] for r in sites)]) / MB
    for slot in slots:
        mine = [r for r in sites if r["ubatch"] == slot["ubatch"] and r["lane"] == slot["lane"]]
        start = y
        if not [r for r in mine if r["sizes_slot"]]:
            # Sized like a sibling micro-batch (at its next call or at lock()): show which.
            sizing = [r for r in sites if r["lane"] == slot["lane"] and r["sizes_slot"]]
            for r in sizing[:1]:
                mb = r["peak"] / MB
                ax.barh(y, mb, color="white", edgecolor=_SIZING, hatch="//", height=0.7)
                note = f" {mb:.2f} MB  sizes the slot (from ubatch {r['ubatch']})"
                ax.text(mb, y, note, va="center", fontsize=9, color=_SIZING)
                labels.append(f"{r['site']} (ubatch {r['ubatch']})")
                y += 1
        for r in mine:
            mb = r["peak"] / MB
            color = _SIZING if r["sizes_slot"] else _OTHER
            ax.barh(y, mb, color=color, height=0.7)
            note = f" {mb:.2f} MB ({r['share']:.0%})"
            if r["sizes_slot"]:
                note += "  sizes the slot"
            ax.text(mb, y, note, va="center", fontsize=9, color="#222222")
            labels.append(r["site"])
            y += 1
        capacity = slot["capacity"] / MB
        ax.plot([capacity, capacity], [start - 0.45, y - 0.55], "k--", linewidth=1.2)
        name = f"ubatch {slot['ubatch']}, lane {slot['lane']}"
        ax.text(
            capacity,
            start - 0.5,
            f"slot {name}: capacity {capacity:.2f} MB ",
            ha="right",
            va="bottom",
            fontsize=9,
            fontweight="bold",
        )
        y += 0.8
        labels.append("")
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(y - 0.5, -1.2)
    ax.set_xlim(0, biggest * 1.5)
    ax.set_xlabel("peak bytes requested (MB); dashed: the slot's capacity")
    ax.set_title("demand per call site, by slot (red: the call site that sizes the slot)")
    ax.grid(axis="x", alpha=0.3)


_CAPACITY = "#1f77b4"
_PLANNED = "#2ca02c"
_LOAD = "#222222"


def _against_load(ax: Any, slots: list[dict[str, Any]]) -> None:
    """Per slot: its capacity and its planned need as bars, its LOAD as a black tick."""
    labels = []
    biggest = max([1, *(s["capacity"] for s in slots), *(s["planned"] or 0 for s in slots)])
    for y, slot in enumerate(slots):
        load, planned = slot["load"], slot["planned"]
        capacity = slot["capacity"] / MB
        ax.barh(y - 0.18, capacity, height=0.34, color=_CAPACITY)
        ratio = slot["capacity_over_load"]
        note = f" capacity {capacity:.2f} MB" + (f" ({ratio:.2f} x LOAD)" if ratio else "")
        ax.text(capacity, y - 0.18, note, va="center", fontsize=8, color="#222222")
        if planned:
            mb = planned / MB
            ax.barh(y + 0.18, mb, height=0.34, color=_PLANNED)
            ratio = slot["planned_over_load"]
            note = f" planned {mb:.2f} MB" + (f" ({ratio:.2f} x LOAD)" if ratio else "")
            ax.text(mb, y + 0.18, note, va="center", fontsize=8, color="#222222")
        if load:
            ax.plot([load / MB] * 2, [y - 0.42, y + 0.42], color=_LOAD, linewidth=2.2)
            ax.text(
                load / MB, y + 0.44, f"LOAD {load / MB:.2f} MB ", ha="right", va="top", fontsize=8
            )
        labels.append(f"ubatch {slot['ubatch']}, lane {slot['lane']}")
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.set_ylim(len(slots) - 0.1, -0.7)
    ax.set_xlim(0, biggest / MB * 1.5)
    recorded = bool([s for s in slots if s["load"] is not None])
    ax.set_xlabel(
        "MB; blue: capacity, green: planned need, black tick: LOAD"
        if recorded
        else "MB (LOAD not recorded: the profile predates it)"
    )
    ax.set_title("capacity against LOAD per slot (LOAD: the most bytes live at once)")
    ax.grid(axis="x", alpha=0.3)


def _timeline(ax: Any, report: dict[str, Any]) -> None:
    events = sorted(report["timeline"], key=lambda e: e["t"])
    lanes = report["lanes"]
    count = len(events)
    for index, slot in enumerate(report["slots"]):
        color = _LINES[index % len(_LINES)]
        xs, ys = [0.0], [0.0]
        for step, e in enumerate(events, start=1):
            if e["ubatch"] != slot["ubatch"] or e["lane"] != slot["lane"]:
                continue
            xs.append(step)
            ys.append(e["new"] / MB)
            caller = "presized from the profile" if e["kind"] == "presize" else e["caller"]
            ax.annotate(
                f"{caller}\n{e['old'] / MB:.2f} -> {e['new'] / MB:.2f} MB, {e['t'] * 1e3:.1f} ms",
                (step, e["new"] / MB),
                textcoords="offset points",
                xytext=(5, -24 if step % 2 else 6),
                fontsize=8,
                color=color,
            )
        xs.append(count + 1)
        ys.append(ys[-1])
        label = f"slot ubatch {slot['ubatch']}" + (f", lane {slot['lane']}" if lanes > 1 else "")
        ax.step(xs, ys, where="post", color=color, linewidth=2, label=label, alpha=0.85)
    top = max([1.0, *(e["new"] / MB for e in events)])
    ax.set_ylim(-0.05 * top, top * 1.25)
    ax.set_xlim(-0.2, count + 1.8)
    ax.set_xticks(range(count + 1))
    ax.set_xlabel("resize events in order (the time since the arena was made is in each label)")
    ax.set_ylabel("capacity (MB)")
    ax.set_title("capacity timeline of the warm-up (each step: the call site that grew the slot)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
