"""Rows, DataFrames and files (CSV, JSON, Parquet) from vinlens records.

Every engine returns frozen dataclass records; this module turns any sequence of them (or
of plain dicts) into rows, so the same code exports module tables, configuration fields,
tensor snapshots and per-scene coverage tables. Containers that hold one table are
unwrapped: a ``ModelCapture`` gives its snapshots, ``ModelMetadata`` its modules,
``ModelStructureSpec`` its fields, and any object with a ``to_rows()`` method (the
widgets) is asked for its rows.

pandas and pyarrow are optional (the ``vinlens[export]`` extra); they are imported only
when a DataFrame or a Parquet file is asked for, with an error that names the extra.
CSV and JSON need nothing beyond the standard library.

Files are written to a temporary file beside the target and renamed into place, so an
error while rendering (or a full disk) leaves the previous file as it was. Text that is
not valid Unicode (a tar member name in Latin-1, carried as ``surrogateescape``) is
written readably, its odd bytes as ``\\xNN`` (:func:`display_text`), never as an error.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path, PurePath
from typing import Any

__all__ = ["EXPORT_SUFFIXES", "display_text", "export", "to_dataframe", "to_rows"]

#: File suffixes :func:`export` understands, and the format each one writes.
EXPORT_SUFFIXES = {".csv": "CSV", ".json": "JSON", ".parquet": "Parquet"}

_CONTAINER_FIELDS = ("snapshots", "modules", "fields")


def display_text(text: str) -> str:
    r"""``text`` as valid Unicode: bytes that were not UTF-8 shown as ``\xNN``.

    Names read from tar headers and file systems that are not UTF-8 (say the Latin-1
    bytes of ``café``) reach Python as ``surrogateescape`` strings, which cannot be
    written as UTF-8, JSON for a browser, or Arrow. They are shown as ``caf\xe9``:
    readable, and distinct from the valid name ``café``. Valid text is returned unchanged.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    from vinlens.store.coverage import display_name  # the engine's spelling of such names

    try:
        return display_name(text)
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _records_of(obj: Any) -> Sequence[Any]:
    """The sequence of records that ``obj`` stands for."""
    to_rows_method = getattr(obj, "to_rows", None)
    if callable(to_rows_method) and not isinstance(obj, type):
        return list(to_rows_method())
    if isinstance(obj, str | bytes | Mapping) or not isinstance(obj, Sequence):
        for name in _CONTAINER_FIELDS:
            inner = getattr(obj, name, None)
            if isinstance(inner, Sequence) and not isinstance(inner, str | bytes):
                return inner
        raise TypeError(
            f"cannot make rows from {type(obj).__module__}.{type(obj).__qualname__}; expected "
            "a sequence of dataclass records or dicts, a ModelCapture, ModelMetadata, "
            "ModelStructureSpec, or a vinlens widget"
        )
    return obj


def to_rows(records: Any) -> list[dict[str, Any]]:
    """One dict per record, keys in field order; values are kept as Python objects.

    Dataclass records are converted shallowly (a ``shape`` tuple stays a tuple, an enum
    stays an enum), so callers decide how to render them; :func:`export` does that per
    format. Plain mappings are copied. Anything else in the sequence is an error naming
    its position.
    """
    rows: list[dict[str, Any]] = []
    for position, record in enumerate(_records_of(records)):
        if dataclasses.is_dataclass(record) and not isinstance(record, type):
            rows.append({f.name: getattr(record, f.name) for f in dataclasses.fields(record)})
        elif isinstance(record, Mapping):
            rows.append({str(key): value for key, value in record.items()})
        else:
            raise TypeError(
                f"record {position} is a {type(record).__module__}.{type(record).__qualname__}; "
                "expected a dataclass record or a dict"
            )
    return rows


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Union of keys, first-seen order (records of one type all share theirs)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _plain(value: Any) -> Any:
    """A value as JSON data: enums by value, tuples as lists, non-finite floats as strings.

    Strict JSON has no NaN or Infinity; they become the strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"`` (what pandas and JavaScript's ``Number()`` read).
    """
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return display_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, PurePath):
        return display_text(str(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {display_text(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return _plain(item())
        except (TypeError, ValueError):
            pass
    return display_text(str(value))


def _csv_cell(value: Any) -> str:
    """Scalars as text, structured values as compact JSON, None as an empty cell."""
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    return str(value)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_safe_cell(value: Any) -> str:
    """A CSV cell that a spreadsheet will not run as a formula (OWASP CSV injection).

    Text starting with ``= + - @`` or a tab/CR gets a leading ``'``; numbers keep their
    sign. The browser's Download CSV does the same (``js/lib/dom.ts:csvField``).
    """
    text = _csv_cell(value)
    if text.startswith(_FORMULA_START) and not isinstance(_plain(value), int | float):
        return "'" + text
    return text


def _require(module: str, purpose: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs {module}, which is not installed; install the optional "
            "extra with `pip install 'vinlens[export]'`"
        ) from exc


def to_dataframe(records: Any) -> Any:
    """A ``pandas.DataFrame`` with one row per record (needs the ``vinlens[export]`` extra).

    Enums become their values; tuples (shapes, sampled values, config paths) stay tuples
    in object columns so nothing is lost.
    """
    pandas = _require("pandas", "to_dataframe")
    rows = to_rows(records)
    columns = _columns(rows)
    data = {name: [_dataframe_value(row.get(name)) for row in rows] for name in columns}
    return pandas.DataFrame(data, columns=columns)


def _dataframe_value(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _parquet_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    pa = _require("pyarrow", "Parquet export")
    arrays = []
    columns = _columns(rows)
    for name in columns:
        values = [_plain(row.get(name)) for row in rows]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            # Mixed kinds in one column (a config's values: ints, strings, bools): keep
            # every cell, as its CSV text, rather than refusing the export.
            arrays.append(pa.array([None if v is None else _csv_cell(v) for v in values]))
    return pa.Table.from_arrays(arrays, names=columns)


def export(records: Any, path: str | PathLike[str]) -> Path:
    """Write records to ``path`` as CSV, JSON or Parquet, chosen by the file suffix.

    CSV cells hold scalars as text and structured values (shapes, sampled values,
    paths) as compact JSON; JSON is a list of objects (strict: non-finite floats as
    strings); Parquet keeps numeric columns typed (needs ``vinlens[export]``).
    Returns the path written.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        accepted = ", ".join(f"{s} ({f})" for s, f in EXPORT_SUFFIXES.items())
        raise ValueError(
            f"cannot export to {str(target)!r}: unknown suffix {suffix!r}; use {accepted}"
        )
    if not target.parent.is_dir():
        raise FileNotFoundError(
            f"cannot export to {str(target)!r}: directory {str(target.parent)!r} does not exist"
        )
    rows = to_rows(records)
    if suffix == ".csv":
        _replace_atomically(target, lambda tmp: _write_csv(tmp, rows))
    elif suffix == ".json":
        text = json.dumps([_plain(row) for row in rows], indent=1, allow_nan=False)
        _replace_atomically(target, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))
    else:
        table = _parquet_table(rows)
        parquet = _require("pyarrow.parquet", "Parquet export")
        _replace_atomically(target, lambda tmp: parquet.write_table(table, str(tmp)))
    return target


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    columns = _columns(rows)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        # Header names are text a spreadsheet reads like any cell: escaped the same way.
        writer.writerow([_csv_safe_cell(name) for name in columns])
        for row in rows:
            writer.writerow([_csv_safe_cell(row.get(name)) for name in columns])


def _replace_atomically(target: Path, write: Callable[[Path], object]) -> None:
    """Write through ``write(tmp)`` to a temporary file beside ``target``, then rename it.

    The rename is atomic on one file system, so readers see the old file or the new one,
    never a truncated mix, and a failure midway leaves the old file untouched. A symlinked
    target keeps its link: the file it points at is replaced.
    """
    final = target.resolve() if target.is_symlink() else target
    try:
        mode = final.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
