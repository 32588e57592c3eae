"""What every series accumulator needs: reservoir salts and columns, and merging keyed dicts."""

from __future__ import annotations

import copy
import zlib
from typing import Any

from vinlens.store.diagnostics.sampling import Reservoir

__all__ = ["merge_dict", "reservoir_column", "reservoir_salt"]


def reservoir_salt(kind: str, name: str) -> int:
    """A reservoir salt fixed by the series' name, not by the order series were met."""
    return zlib.crc32(f"{kind}:{name}".encode())


def reservoir_column(reservoir: Reservoir) -> list[float]:
    values: list[float] = reservoir.finish()[:, 0].tolist()
    return values


def merge_dict(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    for key, value in theirs.items():
        if key in mine:
            mine[key].merge(value)
        else:
            # A copy: later merges into ``mine`` must not reach into ``theirs``.
            mine[key] = copy.deepcopy(value)
