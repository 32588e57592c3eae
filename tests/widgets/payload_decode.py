"""Read back what encode_table() sends, as the browser's decodeTable() does, for widget tests."""

from __future__ import annotations

from typing import Any

import numpy as np


def table_column(node: dict[str, Any], name: str) -> Any:
    """One column of a ``{"$table": ...}`` node: a list of str, or a numpy array for numbers."""
    col = next(c for c in node["$table"]["columns"] if c["name"] == name)
    if col["dtype"] == "string":
        offsets = np.frombuffer(col["offsets"], dtype="<u4")
        data = col["data"]
        return [data[offsets[i] : offsets[i + 1]].decode() for i in range(len(offsets) - 1)]
    return np.frombuffer(col["data"], dtype=col["dtype"])
