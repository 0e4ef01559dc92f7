"""``python -m arena report PATH [PATH ...] [--plot FILE.png] [--json]``: what a profile
says; with several profiles (one per rank), the per-rank spread of each slot.

Per slot: capacity, its own peak request, the call site that sizes it (the largest peak
in its lane: :meth:`~arena.Arena.lock` brings every micro-batch of a lane to that size),
growth steps, alignment padding, bytes the growth policy (or ``reserve``) left unused, and
bytes held only because a sibling micro-batch needed them; and capacity against LOAD (the
most bytes the slot's requests held live at once, which no buffer can go below) with the
planned need (what the slot needs once its steps are planned, see docs/planning.md). Per
call site: peak bytes, share of the slot, growth steps it caused, distinct layouts,
padding. Per lane: the bytes duplicated across micro-batches.

``--plot`` draws the demand per call site, capacity against LOAD per slot and the capacity
timeline of the warm-up (:mod:`arena.observe.plot`, needs matplotlib: ``pip install
matplotlib``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from arena.base.events import MB
from arena.observe.profilefile import ProfileError, read_profile
from arena.observe.profilepaths import sibling_profiles

__all__ = [
    "PLOT_TYPES",
    "analyse",
    "format_analysis",
    "format_spread",
    "main",
    "plot_problem",
    "read_named_profile",
    "spread",
]


def analyse(profile: dict[str, Any]) -> dict[str, Any]:
    """The report's figures for a validated profile (JSON-ready)."""
    lanes = profile["lanes"]
    slots = profile["slots"]
    timeline = profile["timeline"]
    sites = profile["sites"]
    lane_peak = {
        lane: max([0, *(s["peak"] for s in sites if s["lane"] == lane)], default=0)
        for lane in range(lanes)
    }
    for lane in range(lanes):
        own = [s["peak"] for s in slots if s["lane"] == lane]
        lane_peak[lane] = max([lane_peak[lane], *own])

    def steps(site: str, ubatch: int, lane: int) -> int:
        return sum(
            1
            for e in timeline
            if e["caller"] == site and e["ubatch"] == ubatch and e["lane"] == lane
        )

    site_rows = []
    for site in sites:
        slot = slots[site["ubatch"] * lanes + site["lane"]]
        largest = site["layouts"][0] if site["layouts"] else None
        site_rows.append(
            {
                "site": site["site"],
                "ubatch": site["ubatch"],
                "lane": site["lane"],
                "peak": site["peak"],
                "share": site["peak"] / slot["capacity"] if slot["capacity"] else 0.0,
                "sizes_slot": site["peak"] == lane_peak[site["lane"]] and site["peak"] > 0,
                "growth_steps": steps(site["site"], site["ubatch"], site["lane"]),
                "layouts": len(site["layouts"]),
                "padding": largest["padding"] if largest else 0,
                "largest_layout": largest["views"] if largest else [],
            }
        )
    site_rows.sort(key=lambda r: (r["ubatch"], r["lane"], -r["peak"], r["site"]))
    slot_rows = []
    for slot in slots:
        lane = slot["lane"]
        sizing = [r for r in site_rows if r["lane"] == lane and r["sizes_slot"]]
        mine = [r for r in site_rows if r["lane"] == lane and r["ubatch"] == slot["ubatch"]]
        slot_rows.append(
            {
                "ubatch": slot["ubatch"],
                "lane": lane,
                "capacity": slot["capacity"],
                "peak": slot["peak"],
                "sized_by": sizing[0]["site"] if sizing else None,
                "growth_steps": slot["growths"],
                "padding": max((r["padding"] for r in mine if r["sizes_slot"]), default=0),
                "unused_by_policy": max(0, slot["capacity"] - lane_peak[lane]),
                "held_for_siblings": max(0, min(slot["capacity"], lane_peak[lane]) - slot["peak"]),
                "load": slot.get("load"),
                "capacity_over_load": _ratio(slot["capacity"], slot.get("load")),
                "planned": slot.get("planned"),
                "planned_over_load": _ratio(slot.get("planned"), slot.get("load")),
            }
        )
    lane_rows = []
    for lane in range(lanes):
        capacities = [s["capacity"] for s in slots if s["lane"] == lane]
        lane_rows.append(
            {
                "lane": lane,
                "ubatches": len(capacities),
                "total": sum(capacities),
                "duplicated": sum(capacities) - max(capacities, default=0),
            }
        )
    return {
        "path": None,
        "device": profile["device"],
        "name": profile.get("name"),
        "ubatches": profile["ubatches"],
        "lanes": lanes,
        "alignment": profile["alignment"],
        "growth": profile.get("growth", "?"),
        "runs": profile["runs"],
        "ranks": profile["ranks"],
        "slots": slot_rows,
        "sites": site_rows,
        "lanes_summary": lane_rows,
        "workspaces": sorted(
            profile.get("workspaces", []),
            key=lambda w: (w["ubatch"], w["lane"], w["kind"], str(w["key"])),
        ),
        "timeline": timeline,
    }


def _ratio(nbytes: int | None, load: int | None) -> float | None:
    """``nbytes / load``; None when either was not recorded (or nothing was: LOAD 0)."""
    if not nbytes or not load:
        return None
    return nbytes / load


def _clean(value: Any) -> str:
    """``str(value)`` with every control character escaped (``\\x1b``): a profile's text
    never reaches the terminal as escape sequences."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value)
    )


#: What ``--plot`` can write (matplotlib's formats).
PLOT_TYPES = ("png", "pdf", "svg", "svgz", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def plot_problem(path: str) -> str | None:
    """Why ``--plot path`` cannot be written (no such folder, an unknown image type), or
    None."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        return f"the folder {str(folder)!r} does not exist; create it first or pick another"
    kind = target.suffix.lower().lstrip(".")
    if kind not in PLOT_TYPES:
        return (
            f"{'no file type' if not kind else f'unknown file type .{_clean(kind)}'}; end the "
            f"name in one of .{', .'.join(PLOT_TYPES)} (e.g. report.png)"
        )
    return None


def _workspace_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The library workspaces and Triton blocks the profile records (they presize too)."""
    lines = ["", "library workspaces and Triton blocks (MB)"]
    if not rows:
        return [*lines, "  (none recorded)"]
    lines.append(f"{'slot':<8}{'bytes':>10}  kind     key")
    for w in rows:
        key = "-" if w["key"] is None else _clean(repr(w["key"]))
        lines.append(
            f"{'u' + str(w['ubatch']) + ' l' + str(w['lane']):<8}{_mb(w['bytes']):>10}  "
            f"{w['kind']:<8} {key}"
        )
    return lines


def _mb(nbytes: int) -> str:
    return f"{nbytes / MB:.2f}"


def _load_lines(slots: list[dict[str, Any]]) -> list[str]:
    """The capacity-against-LOAD table."""
    lines = [
        "",
        "capacity against LOAD (MB)",
        f"{'slot':<8}{'capacity':>10}{'LOAD':>10}{'cap/LOAD':>10}{'planned':>10}{'plan/LOAD':>11}",
    ]
    if not [s for s in slots if s["load"] is not None]:
        return [*lines, "  (not recorded: the profile was written before LOAD was)"]
    for s in slots:
        load, planned = s["load"], s["planned"]
        cap_ratio, plan_ratio = s["capacity_over_load"], s["planned_over_load"]
        lines.append(
            f"{'u' + str(s['ubatch']) + ' l' + str(s['lane']):<8}{_mb(s['capacity']):>10}"
            f"{_mb(load) if load is not None else '-':>10}"
            f"{f'{cap_ratio:.2f}' if cap_ratio is not None else '-':>10}"
            f"{_mb(planned) if planned else '-':>10}"
            f"{f'{plan_ratio:.2f}' if plan_ratio is not None else '-':>11}"
        )
    return [
        *lines,
        "  LOAD: the most bytes the slot's requests held live at once; no buffer holds them",
        "  in less. planned: what the slot needs once its steps are planned (the next start",
        "  is presized to it); '-' where no step was planned",
    ]


def format_analysis(report: dict[str, Any]) -> str:
    """The report as tables for people."""
    lines = [
        f"arena profile {_clean(report['path'] or '')}".rstrip()
        + ("" if report.get("name") is None else f" (arena {_clean(report['name'])!r})"),
        f"{_clean(report['device'])}, {report['ubatches']} ubatches x {report['lanes']} lanes, "
        f"alignment {report['alignment']}, growth {report['growth']!r}; "
        f"{report['runs']} run(s), ranks {report['ranks']}",
        "",
        "slots (MB)",
        f"{'slot':<8}{'capacity':>10}{'own peak':>10}{'growths':>9}{'padding B':>11}"
        f"{'unused':>8}{'siblings':>10}  sized by",
    ]
    for s in report["slots"]:
        lines.append(
            f"{'u' + str(s['ubatch']) + ' l' + str(s['lane']):<8}{_mb(s['capacity']):>10}"
            f"{_mb(s['peak']):>10}{s['growth_steps']:>9}{s['padding']:>11}"
            f"{_mb(s['unused_by_policy']):>8}{_mb(s['held_for_siblings']):>10}  "
            f"{_clean(s['sized_by'] or '-')}"
        )
    lines += [
        "  slot u0 l1 = ubatch 0, lane 1. padding: alignment bytes in the layout that sizes",
        "  the slot; unused: capacity above the lane's peak (growth policy or reserve);",
        "  siblings: held because another micro-batch of the lane needed it",
        *_load_lines(report["slots"]),
        "",
        "call sites (MB)",
        f"{'slot':<8}{'peak':>10}{'share':>8}{'growths':>9}{'layouts':>9}{'padding B':>11}  site",
    ]
    for r in report["sites"]:
        mark = "  <- sizes the slot" if r["sizes_slot"] else ""
        lines.append(
            f"{'u' + str(r['ubatch']) + ' l' + str(r['lane']):<8}{_mb(r['peak']):>10}"
            f"{r['share']:>8.0%}{r['growth_steps']:>9}{r['layouts']:>9}"
            f"{r['padding']:>11}  {_clean(r['site'])}{mark}"
        )
    if not report["sites"]:
        lines.append("  (none recorded: the arena had track_call_sites=False)")
    lines += [*_workspace_lines(report.get("workspaces", [])), "", "micro-batch duplication"]
    for lane in report["lanes_summary"]:
        if lane["ubatches"] == 1:  # nothing to copy for: "1 micro-batch buffers hold ..."
            lines.append(
                f"  lane {lane['lane']}: one micro-batch buffer holds {_mb(lane['total'])} "
                "MB, no copies (one micro-batch)"
            )
            continue
        lines.append(
            f"  lane {lane['lane']}: {lane['ubatches']} micro-batch buffers hold "
            f"{_mb(lane['total'])} MB, of which {_mb(lane['duplicated'])} MB are copies "
            "for the other micro-batches"
        )
    return "\n".join(lines)


def spread(profiles: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per slot, each profile's capacity and peak request (one profile per rank, in the
    order given) with their minimum and maximum: how far the ranks' warm-ups lie apart
    (``ws.lock(group=...)`` sizes every rank for the maximum).

    Raises
    ------
    ValueError
        The profiles differ in ubatches or lanes (one arena configuration is compared).
    """
    shapes = {(p["ubatches"], p["lanes"]) for _, p in profiles}
    if len(shapes) > 1:
        raise ValueError(f"the profiles differ in (ubatches, lanes): {sorted(shapes)}")
    rows = []
    for index, slot in enumerate(profiles[0][1]["slots"]):
        row: dict[str, Any] = {"ubatch": slot["ubatch"], "lane": slot["lane"]}
        for name in ("capacity", "peak"):
            values = [p["slots"][index][name] for _, p in profiles]
            row[name] = values
            row[f"{name}_min"], row[f"{name}_max"] = min(values), max(values)
        rows.append(row)
    return {
        "profiles": [
            {"path": path, "ranks": p["ranks"], "world": p.get("world", 1)} for path, p in profiles
        ],
        "slots": rows,
    }


def format_spread(report: dict[str, Any]) -> str:
    """:func:`spread` as a table for people: per slot and figure, each rank's MB, then the
    minimum, the maximum and their ratio."""
    profiles = report["profiles"]
    labels = [
        "r" + ",".join(str(r) for r in p["ranks"]) if p["ranks"] else f"#{i}"
        for i, p in enumerate(profiles)
    ]
    world = max(p["world"] for p in profiles)
    lines = [
        f"per-rank spread over {len(profiles)} profiles (world size {world})",
        *(f"  {label}: {p['path']}" for label, p in zip(labels, profiles, strict=True)),
        "",
        f"{'slot':<8}{'figure':<10}"
        + "".join(f"{label:>10}" for label in labels)
        + f"{'min':>10}{'max':>10}{'max/min':>9}",
    ]
    for row in report["slots"]:
        for name in ("capacity", "peak"):
            low, high = row[f"{name}_min"], row[f"{name}_max"]
            ratio = f"{high / low:.2f}" if low else "-"
            lines.append(
                f"{'u' + str(row['ubatch']) + ' l' + str(row['lane']):<8}{name:<10}"
                + "".join(f"{_mb(v):>10}" for v in row[name])
                + f"{_mb(low):>10}{_mb(high):>10}{ratio:>9}"
            )
    lines.append(
        "  MB per rank; lock(group=...) sizes every rank for the max (docs/distributed.md)"
    )
    return "\n".join(lines)


def read_named_profile(path: str) -> tuple[dict[str, Any] | None, int, str]:
    """The profile at ``path`` for a command; else None, the command's exit code (1: no
    file, 2: not a usable profile) and a one-line message naming the file and the fix."""
    try:
        return read_profile(path), 0, ""
    except FileNotFoundError:
        beside = sibling_profiles(path)
        also = (
            f"; the profiles of arenas beside it: {', '.join(str(p) for p in beside)}"
            if beside
            else ""
        )
        return None, 1, f"no profile at {path!r}: run the engine with Arena(profile=PATH){also}"
    except ProfileError as exc:
        return (
            None,
            2,
            f"{path!r} is not a usable profile: {exc}. Record a new one with Arena(profile=PATH)",
        )


def _fail(message: str) -> None:
    """One line on stderr that names the command, as ``python -m arena plan``'s do."""
    print(f"python -m arena report: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m arena report``.

    Parameters
    ----------
    argv
        The arguments after ``report`` (``sys.argv[2:]`` when None).

    Returns
    -------
    int
        0 when shown; 1 when there is no file at the path (or ``--plot`` lacks
        matplotlib); 2 when the file is not a valid profile (one line on stderr says why).
    """
    parser = argparse.ArgumentParser(
        prog="python -m arena report",
        description="Show what a recorded profile says: per slot, per call site and per "
        "lane, which call site sizes each slot and what memory is left unused.",
    )
    parser.add_argument(
        "path",
        nargs="+",
        help="a profile written by Arena(profile=PATH); several (one per rank): the "
        "per-rank spread of each slot",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the report, needs matplotlib (default: no plot)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the figures as JSON (default: tables)"
    )
    args = parser.parse_args(argv)
    problem = None if args.plot is None else plot_problem(args.plot)
    if problem is not None:
        _fail(f"--plot {args.plot!r}: {problem}")
        return 2
    profiles = []
    for path in args.path:
        profile, code, message = read_named_profile(path)
        if profile is None:
            _fail(message)
            return code
        profiles.append((path, profile))
    if len(profiles) > 1:
        try:
            ranks = spread(profiles)
        except ValueError as exc:
            _fail(f"cannot compare these profiles: {exc}")
            return 2
        print(json.dumps(ranks, indent=1) if args.json else format_spread(ranks))
        return 0
    args.path, profile = profiles[0]
    try:
        report = analyse(profile)
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:  # no traceback
        _fail(
            f"{args.path!r} is not a usable profile: the report cannot read it "
            f"({type(exc).__name__}: {' '.join(str(exc).split())})"
        )
        return 2
    report["path"] = args.path
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_analysis(report))
        beside = sibling_profiles(args.path)
        if beside:
            names = ", ".join(_clean(p.name) for p in beside)
            print(f"\nother arenas' profiles beside it (ARENA_PROFILE): {names}")
    if args.plot:
        try:
            from arena.observe.plot import plot_report
        except ImportError as exc:
            _fail(f"--plot needs matplotlib ({exc}); pip install matplotlib")
            return 1
        try:
            plot_report(report, args.plot)
        except (OSError, ValueError) as exc:  # unwritable, or a type matplotlib refuses
            _fail(f"--plot {args.plot!r}: cannot write it ({exc})")
            return 1
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
