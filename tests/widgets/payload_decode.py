"""Read back what the payload codecs send, as the browser's decoders do, for widget tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def array(node: dict[str, Any]) -> np.ndarray[Any, Any]:
    """A ``{"$array": ...}`` node as the numpy array it encodes."""
    a = node["$array"]
    return np.frombuffer(a["data"], dtype=a["dtype"]).reshape(a["shape"])


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll until a widget's background follower has caught up (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the widget did not catch up within the timeout")
        time.sleep(0.02)


def table_column(node: dict[str, Any], name: str) -> Any:
    """One column of a ``{"$table": ...}`` node: a list of str, or a numpy array for numbers."""
    col = next(c for c in node["$table"]["columns"] if c["name"] == name)
    if col["dtype"] == "string":
        offsets = np.frombuffer(col["offsets"], dtype="<u4")
        data = col["data"]
        return [data[offsets[i] : offsets[i + 1]].decode() for i in range(len(offsets) - 1)]
    return np.frombuffer(col["data"], dtype=col["dtype"])


_DTYPES = {
    "bool": "<u1",  # one byte per value, 0 or 1 (the browser reads a Uint8Array)
    "int8": "<i1",
    "uint8": "<u1",
    "int16": "<i2",
    "uint16": "<u2",
    "int32": "<i4",
    "uint32": "<u4",
    "float32": "<f4",
    "float64": "<f8",
}


def _number(value: float | int) -> Any:
    if isinstance(value, float) and not np.isfinite(value):
        return "NaN" if np.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _values(dtype: str, data: bytes) -> list[Any]:
    return [_number(v) for v in np.frombuffer(data, dtype=_DTYPES[dtype]).tolist()]


def canonical(value: Any) -> Any:
    """What a wire value means, read from the spec in docs/architecture.md.

    The contract test writes this beside each payload; ``js/lib/wire-contract.test.ts``
    decodes the same payload with the browser's decoders and must arrive at the same
    tree: non-finite floats as "NaN"/"Infinity"/"-Infinity", arrays and table columns as
    flat value lists, other binary data as a list of byte values.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": list(bytes(value))}
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"$float"}:
        return value["$float"]
    if set(value) == {"$array"}:
        node = value["$array"]
        return {
            "$array": {
                "dtype": node["dtype"],
                "shape": list(node["shape"]),
                "values": _values(node["dtype"], node["data"]),
            }
        }
    if set(value) == {"$table"}:
        table = value["$table"]
        columns = []
        for col in table["columns"]:
            if col["dtype"] == "string":
                offsets = np.frombuffer(col["offsets"], dtype="<u4")
                data = bytes(col["data"])
                strings = [
                    data[offsets[i] : offsets[i + 1]].decode("utf-8")
                    for i in range(len(offsets) - 1)
                ]
                columns.append({"name": col["name"], "kind": "string", "values": strings})
            else:
                columns.append(
                    {
                        "name": col["name"],
                        "kind": "numeric",
                        "dtype": col["dtype"],
                        "values": _values(col["dtype"], col["data"]),
                    }
                )
        return {"$table": {"length": table["length"], "columns": columns}}
    return {str(k): canonical(v) for k, v in value.items()}
