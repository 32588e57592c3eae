"""Constants of the format, store locations, the spec's block table and paths inside a store.

Part of :mod:`vinlens.store.format` (its docstring maps the package).
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Final

STORE_FORMAT: Final = "vin-offline-store"
SUPPORTED_VERSIONS: Final[tuple[int, ...]] = (1,)
MANIFEST_FILE: Final = "manifest.json"
SAMPLE_INDEX_FILE: Final = "sample_index.jsonl"
SHARDS_DIR: Final = "shards"
#: Largest ``manifest.json`` accepted: about 40k shards of ten blocks. Larger is damage
#: (refused after reading at most this many bytes + 1, never the whole file).
MAX_MANIFEST_BYTES: Final = 64 << 20
#: Longest ``sample_index.jsonl`` line accepted (a row is seven short fields).
MAX_SAMPLE_INDEX_LINE_BYTES: Final = 64 << 10
BACKBONE_PREFIX: Final = "backbone."
RRI_COMPONENT_PREFIX: Final = "rri_components."

# Numeric dtypes a block or an ndarray record may carry. Object, string, void and datetime
# dtypes are refused: they either need pickle or have no portable byte layout.
NUMERIC_DTYPES: Final[frozenset[str]] = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    }
)

# Shard ids become directory names; keep them to one safe path component.
SHARD_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z", re.ASCII)
# Block names become zarr node names and file stems.
_BLOCK_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z", re.ASCII)
# fsspec URL: a scheme of two or more characters (one letter is a Windows drive) and "://".
_URL_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_MANGLED_URL_PATTERN: Final = re.compile(r"^(s3|s3a|gs|gcs|az|abfs|memory|https?):/[^/]")


def is_url(location: str | os.PathLike[str]) -> bool:
    """True when ``location`` is an fsspec URL (``scheme://...``) rather than a local path."""
    return isinstance(location, str) and _URL_PATTERN.match(location) is not None


def normalize_location(location: str | os.PathLike[str]) -> Path | str:
    """A store or raw-dataset location as configs keep it.

    Local paths (and ``file://`` URLs) become ``~``-expanded :class:`~pathlib.Path` objects,
    as local paths are everywhere else in vinlens; other URLs stay strings, because ``Path`` would
    fold ``s3://b/x`` into ``s3:/b/x``.
    """
    if not isinstance(location, (str, os.PathLike)):
        raise TypeError(
            f"store location must be a path or a URL string, got {type(location).__name__}"
        )
    if not isinstance(location, str) and _MANGLED_URL_PATTERN.match(os.fspath(location)):
        raise ValueError(
            f"{os.fspath(location)!r} looks like a URL folded by pathlib (Path('s3://b/x') "
            "is 's3:/b/x'); pass the URL as a string"
        )
    if isinstance(location, str) and is_url(location):
        scheme, _, rest = location.partition("://")
        if scheme.lower() == "file":
            return Path(rest or "/").expanduser()
        return f"{scheme.lower()}://{rest.rstrip('/')}" if rest.strip("/") else location
    return Path(location).expanduser()


class BlockKind(StrEnum):
    """How a block is stored: a zarr v3 array, or msgpack maps indexed by an offsets file."""

    ZARR_ARRAY = "zarr_array"
    MSGPACK_INDEXED_RECORDS = "msgpack_indexed_records"


# --------------------------------------------------------------------------------------
# The spec's block table
# --------------------------------------------------------------------------------------

# Fixed dtype and kind of each named block (``None`` dtype: a record block). Backbone
# fields may be float16 or float32; rri components are float32.
_FIXED_BLOCKS: Final[dict[str, tuple[BlockKind, str | None]]] = {
    "vin_points": (BlockKind.MSGPACK_INDEXED_RECORDS, None),
    "candidate_valid": (BlockKind.ZARR_ARRAY, "bool"),
    "rri": (BlockKind.ZARR_ARRAY, "float32"),
    "candidate_ids": (BlockKind.ZARR_ARRAY, "int64"),
    "candidate_poses": (BlockKind.ZARR_ARRAY, "float32"),
}
BACKBONE_DTYPES: Final[frozenset[str]] = frozenset({"float16", "float32"})


def block_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a block name (``None`` when it can): the spec's file-name rule.

    Block names become zarr node names and file stems, so they are one ASCII path component:
    letters, digits, ``_``, ``-`` and ``.``, not starting with ``.``, ``-`` or ``__``.
    """
    if not isinstance(name, str):
        return f"block name {name!r} is a {type(name).__name__}, expected a string"
    if not _BLOCK_NAME_PATTERN.match(name) or name.startswith("__"):
        return (
            f"block name {name!r} is not a safe file name "
            "(ASCII letters, digits, '_', '-', '.', not starting with '.', '-' or '__')"
        )
    return None


def block_kind_for(name: str) -> BlockKind | None:
    """The kind the spec prescribes for block ``name``, or ``None`` for a name it does not know."""
    if name in _FIXED_BLOCKS:
        return _FIXED_BLOCKS[name][0]
    if name.startswith(BACKBONE_PREFIX) or name.startswith(RRI_COMPONENT_PREFIX):
        return BlockKind.ZARR_ARRAY
    return None


def expected_block_dtype(name: str) -> frozenset[str] | None:
    """Dtypes the spec allows for block ``name`` (``None``: unknown block or record block)."""
    if name in _FIXED_BLOCKS:
        dtype = _FIXED_BLOCKS[name][1]
        return None if dtype is None else frozenset({dtype})
    if name.startswith(BACKBONE_PREFIX):
        return BACKBONE_DTYPES
    if name.startswith(RRI_COMPONENT_PREFIX):
        return frozenset({"float32"})
    return None


# --------------------------------------------------------------------------------------
# Paths inside a store (relative, '/'-separated: the access layer resolves them)
# --------------------------------------------------------------------------------------


def shard_dir(shard_id: str) -> str:
    return f"{SHARDS_DIR}/{shard_id}"


def arrays_dir(shard_id: str) -> str:
    """The zarr v3 group holding a shard's ``zarr_array`` blocks."""
    return f"{SHARDS_DIR}/{shard_id}/arrays"


def record_paths(shard_id: str, block: str) -> tuple[str, str]:
    """``(msgpack, offsets)`` relative paths of a record block."""
    base = f"{SHARDS_DIR}/{shard_id}/records/{block}"
    return f"{base}.msgpack", f"{base}.offsets"
