"""What the reader needs from a zarr v3 ``zarr.json``: shapes, dtype, the chunk-key grammar.

The plain layout our writer produces (regular grid, default ``c/`` keys, one ``bytes``
codec) is parsed here without zarr, so opening a block costs no zarr machinery; every
other layout is handed to zarr's own metadata parser. Chunk keys are decoded from a
listing and accepted only in the array's canonical spelling.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from vinlens.store.format import NUMERIC_DTYPES

__all__ = ["ArrayLayout", "grid_coords", "parse_array_layout"]


def grid_coords(counts: list[int]) -> Iterator[tuple[int, ...]]:
    """Grid coordinates in C order, lazily (``itertools.product`` would build every range)."""
    if any(n <= 0 for n in counts):
        return
    coords = [0] * len(counts)
    while True:
        yield tuple(coords)
        axis = len(counts) - 1
        while axis >= 0:
            coords[axis] += 1
            if coords[axis] < counts[axis]:
                break
            coords[axis] = 0
            axis -= 1
        if axis < 0:
            return


@dataclass(frozen=True)
class ArrayLayout:
    """What the reader needs from a zarr v3 ``zarr.json``: shapes, dtype, chunk keys, raw layout."""

    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]  # the storage-key grid (the shard shape under sharding)
    dtype: np.dtype[Any]  # native byte order
    raw_dtype: np.dtype[Any] | None  # on-disk dtype when chunks are raw bytes of whole rows
    metadata: Any  # zarr ArrayV3Metadata when zarr had to parse it, else None
    stored_dtype: np.dtype[Any] | None = None  # on-disk dtype of a plain layout's chunks

    def encode_key(self, coords: tuple[int, ...]) -> str:
        if self.metadata is not None:
            return str(self.metadata.encode_chunk_key(coords))
        return "c/" + "/".join(str(c) for c in coords) if coords else "c"

    def decode_key(self, key: str, counts: list[int]) -> tuple[int, ...] | None:
        """Grid coordinates of chunk key ``key``, or ``None`` for a name outside the grid."""
        if key == "zarr.json":
            return None
        # Parse any spelling of the integers, then accept only the array's own spelling.
        body = key[1:].lstrip("/.") if key.startswith("c") else key
        try:
            coords = tuple(int(part) for part in body.replace(".", "/").split("/")) if body else ()
        except ValueError:
            return None
        if len(coords) != len(counts) or not all(
            0 <= c < n for c, n in zip(coords, counts, strict=True)
        ):
            return None
        # Only the canonical spelling names a chunk ("c/01" is not "c/1").
        return coords if self.encode_key(coords) == key else None


def parse_array_layout(data: bytes) -> ArrayLayout:
    """Parse ``zarr.json``; the plain layout our writer produces needs no zarr machinery.

    Plain means: regular chunk grid, default ``c/`` chunk keys with ``/``, and a single
    ``bytes`` codec (no compression, filters, sharding or storage transformers). Anything
    else is handed to zarr's own metadata parser and read through zarr.
    """
    raw = json.loads(data)
    grid_config = raw.get("chunk_grid") if isinstance(raw, dict) else None
    declared = (
        grid_config.get("configuration", {}).get("chunk_shape")
        if isinstance(grid_config, dict) and isinstance(grid_config.get("configuration"), dict)
        else None
    )
    if isinstance(declared, list) and any(
        isinstance(n, int) and not isinstance(n, bool) and n <= 0 for n in declared
    ):
        # A zero extent would divide by zero (or declare no chunks at all) further on.
        raise ValueError(f"chunk_shape {declared} has an extent <= 0; every extent must be >= 1")
    if not isinstance(raw, dict) or raw.get("zarr_format") != 3:
        found = raw.get("zarr_format") if isinstance(raw, dict) else None
        raise ValueError(f"zarr_format is {found!r}, expected 3")
    if raw.get("node_type") != "array":
        raise ValueError(f"node_type is {raw.get('node_type')!r}, expected 'array'")
    grid = raw.get("chunk_grid")
    keys = raw.get("chunk_key_encoding")
    codecs = raw.get("codecs")
    shape = raw.get("shape")
    dtype_name = raw.get("data_type")
    plain = (
        isinstance(shape, list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        and isinstance(dtype_name, str)
        and dtype_name in NUMERIC_DTYPES
        and isinstance(grid, dict)
        and grid.get("name") == "regular"
        and isinstance(grid.get("configuration"), dict)
        and isinstance(grid["configuration"].get("chunk_shape"), list)
        and len(grid["configuration"]["chunk_shape"]) == len(shape)
        and all(isinstance(n, int) and n > 0 for n in grid["configuration"]["chunk_shape"])
        and isinstance(keys, dict)
        and keys.get("name") == "default"
        and (keys.get("configuration") or {}).get("separator", "/") == "/"
        and isinstance(codecs, list)
        and len(codecs) == 1
        and isinstance(codecs[0], dict)
        and codecs[0].get("name") == "bytes"
        and not raw.get("storage_transformers")
    )
    if plain:
        assert isinstance(shape, list) and isinstance(grid, dict) and isinstance(codecs, list)
        chunk_shape = tuple(int(n) for n in grid["configuration"]["chunk_shape"])
        dtype = np.dtype(str(dtype_name))
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        if endian not in ("little", "big"):
            raise ValueError(f"bytes codec endian {endian!r}, expected 'little' or 'big'")
        on_disk = (
            dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
        )
        whole_rows = bool(shape) and chunk_shape[1:] == tuple(shape[1:])
        return ArrayLayout(
            tuple(shape), chunk_shape, dtype, on_disk if whole_rows else None, None, on_disk
        )

    from zarr.core.metadata import ArrayV3Metadata

    meta = ArrayV3Metadata.from_dict(raw)
    chunk_shape = tuple(int(n) for n in getattr(meta.chunk_grid, "chunk_shape", ()))
    if len(chunk_shape) != len(meta.shape) or any(n <= 0 for n in chunk_shape):
        raise ValueError(
            f"chunk grid {list(chunk_shape)} for shape {list(meta.shape)}: expected a regular "
            "grid with one extent >= 1 per dimension"
        )
    return ArrayLayout(
        shape=tuple(meta.shape),
        chunk_shape=chunk_shape,
        dtype=np.dtype(meta.dtype.to_native_dtype()),
        raw_dtype=None,
        metadata=meta,
    )
