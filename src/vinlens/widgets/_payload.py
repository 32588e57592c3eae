"""The one place where engine records become what crosses to the browser.

Small records become JSON-safe dicts: dataclasses to dicts, enums by value, tuples to
lists, text that is not valid Unicode (a Latin-1 tar member name) readably as
:func:`vinlens.export.display_text`, and non-finite floats made explicit as ``{"$float": "NaN" | "Infinity" |
"-Infinity"}`` because JSON has no spelling for them and Jupyter's serializer would
otherwise either fail or silently write ``NaN`` that strict parsers reject.

Arrays and tables cross as binary buffers, never as per-row JSON:

- an array is ``{"$array": {"dtype": "float32", "shape": [...], "data": <bytes>}}``,
  little-endian, C order;
- a table is ``{"$table": {"length": n, "columns": [...]}}`` where each column is either
  numeric ``{"name", "dtype", "data"}`` or string ``{"name", "dtype": "string",
  "offsets": <uint32 bytes>, "data": <utf-8 bytes>}`` (Arrow's string layout, so the
  browser decodes only the rows it paints).

``bytes`` values may sit anywhere in the tree: as a traitlet value, ipywidgets moves them
into the message's binary buffers itself (they arrive in JS as ``DataView``); for custom
messages :func:`split_buffers` does the same, and ``js/lib/payload.ts`` puts them back.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

import numpy as np

from vinlens.export import display_text

_SUPPORTED_NUMERIC = {
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "float32",
    "float64",
}


def encode_float(value: float) -> float | dict[str, str]:
    """A float as JSON can carry it: finite floats unchanged, others explicit."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return {"$float": "NaN"}
    return {"$float": "Infinity" if value > 0 else "-Infinity"}


def to_jsonable(value: Any) -> Any:
    """Convert a record (dataclass, enum, tuple, numpy scalar, ...) into JSON-safe data.

    numpy arrays become ``$array`` nodes carrying raw bytes; everything else becomes
    dicts, lists, strings, numbers, booleans or None. Unknown objects are refused rather
    than stringified, so a record that grows a field of a new type fails loudly here.
    """
    if isinstance(value, str):
        return display_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, np.ndarray):
        return encode_array(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, PurePath):
        return display_text(str(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {display_text(str(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    raise TypeError(
        f"cannot send a value of type {type(value).__module__}.{type(value).__qualname__} "
        "to the browser; expected a dataclass record, mapping, sequence, scalar or numpy array"
    )


def _as_little_endian(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    elif array.dtype == np.int64:
        array = _narrow_int64(array)
    elif array.dtype == np.uint64:
        array = array.astype(np.float64)
    if array.dtype.str not in ("|b1", "|u1", "|i1") and array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array)


def _narrow_int64(array: np.ndarray) -> np.ndarray:
    # JS has no cheap int64 typed array that numbers can use directly; counts we send fit
    # in int32, and anything larger goes as float64 (exact up to 2**53).
    if array.size == 0 or (array.min() >= -(2**31) and array.max() < 2**31):
        return array.astype(np.int32)
    return array.astype(np.float64)


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """An ndarray as a ``$array`` node with little-endian C-order bytes."""
    array = _as_little_endian(np.asarray(array))
    dtype = "bool" if array.dtype == np.bool_ else array.dtype.name
    if dtype not in _SUPPORTED_NUMERIC:
        raise TypeError(f"cannot send array of dtype {array.dtype} to the browser")
    return {"$array": {"dtype": dtype, "shape": list(array.shape), "data": array.tobytes()}}


def encode_string_column(values: Iterable[str | None]) -> tuple[bytes, bytes]:
    """Arrow-style string column: (uint32 offsets, utf-8 data). None becomes ''.

    Text that is not valid Unicode (non-UTF-8 names) is sent as :func:`display_text`.
    """
    encoded = [display_text("" if v is None else str(v)).encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype="<u4")
    if encoded:
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return offsets.tobytes(), b"".join(encoded)


def encode_table(columns: Mapping[str, Sequence[Any] | np.ndarray]) -> dict[str, Any]:
    """A columnar table: numeric columns as typed arrays, others as string columns.

    Every column must have the same length. Python lists of bools/ints/floats become
    numpy arrays; lists of anything else are sent as strings (the caller decides how a
    value reads by converting it before calling).
    """
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"table columns differ in length: {lengths}")
    out_columns: list[dict[str, Any]] = []
    for name, col in columns.items():
        array = col if isinstance(col, np.ndarray) else _column_array(col)
        if array is None:
            offsets, data = encode_string_column(col)
            out_columns.append({"name": name, "dtype": "string", "offsets": offsets, "data": data})
        else:
            node = encode_array(array)["$array"]
            out_columns.append({"name": name, "dtype": node["dtype"], "data": node["data"]})
    length = next(iter(lengths.values()), 0)
    return {"$table": {"length": length, "columns": out_columns}}


def _column_array(col: Sequence[Any]) -> np.ndarray | None:
    if not col:
        return np.zeros(0, dtype=np.float64)
    if all(isinstance(v, bool) for v in col):
        return np.asarray(col, dtype=np.bool_)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in col):
        return np.asarray(col, dtype=np.int64)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in col):
        return np.asarray(col, dtype=np.float64)
    return None


def split_buffers(value: Any) -> tuple[Any, list[bytes]]:
    """Replace every ``bytes`` in a JSON-safe tree by ``{"$buffer": i}``; return the buffers.

    Custom widget messages carry binary data only in a separate buffer list, so the tree
    refers to buffers by index. ``js/lib/payload.ts:joinBuffers`` undoes this.
    """
    buffers: list[bytes] = []

    def walk(node: Any) -> Any:
        if isinstance(node, bytes | bytearray | memoryview):
            buffers.append(bytes(node))
            return {"$buffer": len(buffers) - 1}
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(value), buffers


def payload_nbytes(value: Any) -> int:
    """Bytes of binary payload in a tree (for diagnostics and benchmarks)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, dict):
        return sum(payload_nbytes(v) for v in value.values())
    if isinstance(value, list):
        return sum(payload_nbytes(v) for v in value)
    return 0
