"""The one text style of every ``vinlens`` table, and JSON output for scripts.

Numbers are right-aligned and printed with thousands separators (integers) or four
significant digits (floats), missing values as ``-``; text is left-aligned. Callers pass
raw values and let :func:`format_cell` render them, so every command looks the same.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import PurePath
from typing import Any

__all__ = [
    "format_bytes",
    "format_cell",
    "format_fields",
    "format_number",
    "format_table",
    "print_json",
    "to_json_value",
]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_number(value: float | None, digits: int = 4) -> str:
    """``1,234`` for integers (and integral floats), four significant digits otherwise."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def format_bytes(num_bytes: float) -> str:
    """A byte count in the largest binary unit that keeps it at or above 1 (B to TiB)."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"


def format_cell(value: object) -> str:
    """How one value reads in a table: numbers as :func:`format_number`, ``None`` as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if _is_number(value):
        return format_number(value)  # type: ignore[arg-type]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_cell(v) for v in value) + "]"
    return str(value)


def format_table(
    headers: Sequence[object], rows: Sequence[Sequence[object]], *, right: Collection[int] = ()
) -> str:
    """Rows as columns separated by two spaces under a header rule.

    A column whose values are all numbers (``None`` allowed) is right-aligned, and so is
    every column index in ``right`` (for numbers the caller already turned into text,
    such as percentages or sizes).
    """
    ncols = len(headers)
    numeric = {
        i
        for i in range(ncols)
        if any(row[i] is not None for row in rows)
        and all(row[i] is None or _is_number(row[i]) for row in rows)
    }
    aligned = numeric | set(right)
    cells = [[str(h) for h in headers], *[[format_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(ncols)]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in aligned else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *map(line, cells[1:])])


def format_fields(fields: Sequence[tuple[str, object]]) -> str:
    """A ``field  value`` table for one record's scalar fields."""
    return format_table(("field", "value"), [(name, format_cell(v)) for name, v in fields])


def to_json_value(value: Any) -> Any:
    """JSON-safe form of a record: dataclasses to dicts, tuples to lists, NaN/inf as strings."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, PurePath):
        return str(value)
    return value


def print_json(record: Any) -> None:
    """Print ``record`` as indented JSON that strict parsers accept (no bare NaN)."""
    import json

    print(json.dumps(to_json_value(record), indent=2, allow_nan=False))
