"""Markdown tables from the JSON that ``python -m arena bench --json PATH`` writes.

``python -m arena bench --render PATH`` prints them; ``scripts/render-bench`` writes them
into README.md and docs/performance.md between ``<!-- bench:begin -->`` and
``<!-- bench:end -->``, and a test checks that those blocks equal what this module makes
from ``docs/bench/cpu.json``, so the published numbers cannot drift from the measured ones.

The rendering is driven by the data, not by a list of known fields: every record list
becomes a table whose columns are the records' keys in order of first appearance (a
nested mapping contributes one column per key, named ``outer.inner`` where two mappings
share the key), so a bench that adds fields or methods needs no change here. A record of
several figures with the same fields (``{"step_over_plain": {"median", "p10", "p90"},
...}``) becomes one row per figure.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_SECTIONS", "MARKERS", "render_markdown", "replace_blocks"]

#: What a bare ``<!-- bench:begin -->`` block holds: the workloads and the targets.
DEFAULT_SECTIONS = ("rows", "targets")

#: A marked block: ``<!-- bench:begin [SECTION ...] -->`` ... ``<!-- bench:end -->``.
MARKERS = re.compile(
    r"(?P<begin><!-- bench:begin(?P<sections>(?: [\w-]+)*) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- bench:end -->)",
    re.S,
)


def _number(value: float) -> str:
    """Three significant digits, never an exponent (0.0469, 0.282, 17.4, 252, 2068)."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _number(value)
    return str(value).replace("|", "\\|")


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """One level of nesting becomes columns named by the inner keys; an inner key that two
    nested mappings share (``median`` of two ratios), or that the record has itself, is
    named ``outer.inner``, so that no figure overwrites another."""
    nested = [v for v in record.values() if isinstance(v, Mapping)]
    uses = Counter(inner for value in nested for inner in value)
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            for inner, item in value.items():
                shared = inner in record or uses[inner] > 1
                flat[f"{key}.{inner}" if shared else inner] = item
        else:
            flat[key] = value
    return flat


def _nested(records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which columns come from which nested mapping: ``a, b: `median_us`.`` (columns named
    ``outer.inner`` name their mapping themselves); ``rows`` are the records flattened."""
    lines = []
    for key in dict.fromkeys(k for r in records for k, v in r.items() if isinstance(v, Mapping)):
        inner = dict.fromkeys(
            i
            for r, row in zip(records, rows, strict=True)
            if isinstance(r.get(key), Mapping)
            for i in r[key]
            if f"{key}.{i}" not in row
        )
        if inner:
            lines.append(f"{', '.join(inner)}: `{key}`.")
    return lines


def _figures(record: Mapping[str, Any]) -> list[str] | None:
    """A record of two or more figures with the same fields (each a ``{median, p10, p90}``
    mapping) as one row per figure, its other fields in a table below; None for any
    other record."""
    nested = {k: v for k, v in record.items() if isinstance(v, Mapping)}
    if len(nested) < 2 or len({tuple(v) for v in nested.values()}) != 1:
        return None
    fields = list(next(iter(nested.values())))
    lines = ["| figure | " + " | ".join(fields) + " |", "|" + "---|" * (len(fields) + 1)]
    for name, value in nested.items():
        lines.append("| " + " | ".join([name, *(_cell(value[f]) for f in fields)]) + " |")
    rest = {k: v for k, v in record.items() if k not in nested}
    return [*lines, "", *_table([rest])] if rest else lines


def _table(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """A Markdown table; a column with one value in every row goes to a line above it."""
    rows = [_flatten(r) for r in records]
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    constant = [
        c
        for c in columns
        if len(rows) > 1
        and not [row for row in rows if c not in row]
        and len({_cell(row[c]) for row in rows}) == 1
        and not isinstance(rows[0][c], (int, float))
    ]
    columns = [c for c in columns if c not in constant]
    lines = [f"{c}: {_cell(rows[0][c])} in every row." for c in constant] + _nested(records, rows)
    if lines:
        lines.append("")
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "-")) for c in columns) + " |")
    return lines


def _groups(records: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Consecutive records with the same keys, so each table has no empty columns."""
    groups: list[list[Mapping[str, Any]]] = []
    for record in records:
        if groups and set(groups[-1][0]) == set(record):
            groups[-1].append(record)
        else:
            groups.append([record])
    return groups


def _section(name: str, value: Any) -> list[str]:
    lines = [f"**{name}**", ""]
    if isinstance(value, Mapping) and not [
        v for v in value.values() if not isinstance(v, (Mapping, list))
    ]:
        lines = []
        for key, inner in value.items():
            lines += _section(f"{name}: {key}", inner)
        return lines
    records = [value] if isinstance(value, Mapping) else list(value)
    if not records or [r for r in records if not isinstance(r, Mapping)]:
        return [*lines, f"{_cell(value)}", ""]
    for group in _groups(records):
        figures = _figures(group[0]) if len(group) == 1 else None
        lines += [*(_table(group) if figures is None else figures), ""]
    return lines


def _caption(meta: Mapping[str, Any]) -> str:
    parts = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            parts += [f"{inner} {item}" for inner, item in value.items()]
        else:
            parts.append(f"{key} {value}")
    return "`python -m arena bench`: " + ", ".join(parts) + "."


def render_markdown(result: Mapping[str, Any], sections: Sequence[str] = DEFAULT_SECTIONS) -> str:
    """The Markdown for the named top-level sections of a bench JSON, after its ``meta``.

    Parameters
    ----------
    result : mapping
        The parsed JSON of ``python -m arena bench --json PATH``.
    sections : sequence of str
        Top-level keys to render, in order (``rows``, ``targets``, ``checks``,
        ``memory``, or any other the JSON has).

    Returns
    -------
    str
        A caption line naming the run, then one table per section; ends with a newline.

    Raises
    ------
    KeyError
        If a named section is not in the JSON.
    """
    lines = [_caption(result.get("meta", {})), ""]
    for name in sections:
        lines += _section(name, result[name])
    return "\n".join(lines).rstrip("\n") + "\n"


def replace_blocks(text: str, result: Mapping[str, Any]) -> str:
    """``text`` with every marked block's body rendered afresh from ``result``.

    A block's begin marker may name the sections it holds
    (``<!-- bench:begin checks memory -->``); a bare one holds :data:`DEFAULT_SECTIONS`.
    """

    def render(match: re.Match[str]) -> str:
        names = match["sections"].split() or list(DEFAULT_SECTIONS)
        return match["begin"] + render_markdown(result, names) + match["end"]

    return MARKERS.sub(render, text)
