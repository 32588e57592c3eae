"""The v1 contract as validated Pydantic models: constants, config, manifest, index rows.

Behind the :mod:`vinlens.store.format` door (its docstring says what the room holds).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from vinlens.store.errors import (
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    DirectoryInsteadOfFileError,
    InvalidSampleError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    SampleIndexError,
    SpecialFileError,
    StoreExistsError,
    StoreNotFoundError,
    StoreReplacedError,
    StoreVerificationError,
    UnsupportedFormatError,
    VinOfflineStoreError,
)

__all__ = [
    "BACKBONE_DTYPES",
    "BACKBONE_PREFIX",
    "MANIFEST_FILE",
    "MAX_MANIFEST_BYTES",
    "MAX_SAMPLE_INDEX_LINE_BYTES",
    "NUMERIC_DTYPES",
    "RRI_COMPONENT_PREFIX",
    "SAMPLE_INDEX_FILE",
    "SHARDS_DIR",
    "STORE_FORMAT",
    "SUPPORTED_VERSIONS",
    "BlockKind",
    "BlockMismatchError",
    "Capabilities",
    "CorruptChunkError",
    "CorruptRecordError",
    "DirectoryInsteadOfFileError",
    "InvalidSampleError",
    "ManifestError",
    "MaterializedBlocks",
    "MissingBlockError",
    "MissingChunksError",
    "MissingShardError",
    "SampleIndexError",
    "SampleIndexRow",
    "SpecialFileError",
    "StoreBlockSpec",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StoreShardSpec",
    "StoreVerificationError",
    "UnsupportedFormatError",
    "VinOfflineManifest",
    "VinOfflineStoreConfig",
    "VinOfflineStoreError",
    "arrays_dir",
    "block_kind_for",
    "block_name_problem",
    "expected_block_dtype",
    "format_validation_error",
    "is_url",
    "normalize_location",
    "parse_manifest",
    "parse_sample_index",
    "parse_sample_index_line",
    "record_paths",
    "sample_index_byte_limit",
    "shard_dir",
]

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
_SHARD_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z", re.ASCII)
# Block names become zarr node names and file stems.
_BLOCK_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z", re.ASCII)
# fsspec URL: a scheme of two or more characters (one letter is a Windows drive) and "://".
_URL_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_MANGLED_URL_PATTERN: Final = re.compile(r"^(s3|s3a|gs|gcs|az|abfs|memory|https?):/[^/]")


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


class VinOfflineStoreConfig(BaseModel):
    """Where a store lives: the ``store`` argument of every reader and diagnostics function.

    ``store_dir`` is a local directory (``~`` expanded, kept as a :class:`~pathlib.Path`) or an
    fsspec URL such as ``s3://bucket/prefix``, ``gs://...`` or ``memory://...`` (kept as the
    URL string, without a trailing ``/``); a ``file://`` URL is the local path it names.
    ``raw_dataset_dir`` is the directory (or URL) holding the raw ASE WebDataset ``*.tar``
    shards the store was built from; only coverage diagnostics need it.
    ``storage_options`` go to the fsspec filesystem of URL locations, as pandas, xarray and
    Dask pass them (for S3: ``key``, ``secret``, ``anon``, ``client_kwargs={"endpoint_url":
    ...}``, ...); local paths ignore them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    store_dir: Path | str
    raw_dataset_dir: Path | str | None = None
    storage_options: dict[str, Any] | None = None

    @field_validator("store_dir", "raw_dataset_dir", mode="before")
    @classmethod
    def _location(cls, value: Any) -> Any:
        return None if value is None else normalize_location(value)


def is_url(location: str | os.PathLike[str]) -> bool:
    """True when ``location`` is an fsspec URL (``scheme://...``) rather than a local path."""
    return isinstance(location, str) and _URL_PATTERN.match(location) is not None


def normalize_location(location: str | os.PathLike[str]) -> Path | str:
    """A store or raw-dataset location as configs keep it.

    Local paths (and ``file://`` URLs) become ``~``-expanded :class:`~pathlib.Path` objects,
    exactly as before URLs were accepted; other URLs stay strings, because ``Path`` would
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


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class StoreBlockSpec(_Strict):
    """One block of one shard as declared in the manifest."""

    name: str
    kind: BlockKind
    dtype: str | None
    shape: tuple[int, ...]
    optional: bool = False

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in {k.value for k in BlockKind}:
            supported = ", ".join(repr(k.value) for k in BlockKind)
            raise ValueError(f"unknown block kind {value!r}; supported: {supported}")
        return BlockKind(value) if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = block_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("shape")
    @classmethod
    def _shape(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("shape must have at least one axis (the row axis)")
        if any(n < 0 for n in value):
            raise ValueError(f"shape {list(value)} has a negative extent")
        return value

    @model_validator(mode="after")
    def _dtype_for_kind(self) -> StoreBlockSpec:
        if self.kind is BlockKind.ZARR_ARRAY:
            if self.dtype not in NUMERIC_DTYPES:
                raise ValueError(
                    f"zarr block {self.name!r} has dtype {self.dtype!r}; "
                    f"expected one of {sorted(NUMERIC_DTYPES)}"
                )
        else:
            if self.dtype is not None:
                raise ValueError(
                    f"record block {self.name!r} must have dtype null, found {self.dtype!r}"
                )
            if len(self.shape) != 1:
                raise ValueError(
                    f"record block {self.name!r} must have shape [num_rows], found {list(self.shape)}"
                )
        return self

    @property
    def num_rows(self) -> int:
        return self.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one row (the stored shape without the leading row axis)."""
        return self.shape[1:]

    @property
    def estimated_bytes(self) -> int | None:
        """Uncompressed numeric bytes of the block, or ``None`` for record blocks."""
        if self.dtype is None:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class StoreShardSpec(_Strict):
    """One shard: a row count and the blocks holding those rows."""

    shard_id: str
    num_rows: int = Field(ge=0)
    blocks: tuple[StoreBlockSpec, ...]

    @field_validator("shard_id")
    @classmethod
    def _shard_id(cls, value: str) -> str:
        if not _SHARD_ID_PATTERN.match(value):
            raise ValueError(
                f"shard_id {value!r} is not one safe path component "
                "(letters, digits, '_', '-', '.', not starting with '.' or '-')"
            )
        return value

    @model_validator(mode="after")
    def _blocks_match_rows(self) -> StoreShardSpec:
        seen: set[str] = set()
        for block in self.blocks:
            if block.name in seen:
                raise ValueError(f"shard {self.shard_id!r} declares block {block.name!r} twice")
            seen.add(block.name)
            if block.shape[0] != self.num_rows:
                raise ValueError(
                    f"block {block.name!r} of shard {self.shard_id!r} has {block.shape[0]} rows "
                    f"but the shard has num_rows={self.num_rows}"
                )
        return self

    def block(self, name: str) -> StoreBlockSpec | None:
        """The block called ``name``, or ``None`` when this shard does not store it."""
        for block in self.blocks:
            if block.name == name:
                return block
        return None

    @property
    def block_names(self) -> tuple[str, ...]:
        return tuple(block.name for block in self.blocks)


class Capabilities(_Strict):
    """What kind of supervision the store carries; ``scene_labels`` false is not "all zero"."""

    scene_labels: bool


class MaterializedBlocks(_Strict):
    """Which optional block families the writer materialized."""

    backbone: bool
    rri_components: bool
    candidate_ids: bool
    candidate_poses: bool


class VinOfflineManifest(_Strict):
    """``manifest.json``: the store-level description, written last by the writer."""

    format: str
    version: int
    created_at: str
    num_samples: int = Field(ge=0)
    num_candidates: int = Field(ge=0)
    capabilities: Capabilities
    materialized_blocks: MaterializedBlocks
    shards: tuple[StoreShardSpec, ...]

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value != STORE_FORMAT:
            raise ValueError(f"unsupported format {value!r}; supported: {STORE_FORMAT!r}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value not in SUPPORTED_VERSIONS:
            supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
            raise ValueError(f"unsupported version {value!r}; supported: {supported}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> VinOfflineManifest:
        seen: set[str] = set()
        total = 0
        for shard in self.shards:
            if shard.shard_id in seen:
                raise ValueError(f"shard_id {shard.shard_id!r} appears twice")
            seen.add(shard.shard_id)
            total += shard.num_rows
        if total != self.num_samples:
            raise ValueError(
                f"shards hold {total} rows in total but num_samples={self.num_samples} "
                "(every sample is exactly one shard row)"
            )
        return self

    @property
    def shard_ids(self) -> tuple[str, ...]:
        return tuple(shard.shard_id for shard in self.shards)

    def shard(self, shard_id: str) -> StoreShardSpec | None:
        """The shard called ``shard_id``, or ``None``."""
        for shard in self.shards:
            if shard.shard_id == shard_id:
                return shard
        return None

    def block_names(self) -> tuple[str, ...]:
        """Every block name declared by any shard, in first-seen order."""
        names: dict[str, None] = {}
        for shard in self.shards:
            for block in shard.blocks:
                names.setdefault(block.name, None)
        return tuple(names)

    def to_json_dict(self) -> dict[str, Any]:
        """The manifest as the JSON object written to ``manifest.json``."""
        return self.model_dump(mode="json")


class SampleIndexRow(_Strict):
    """One line of ``sample_index.jsonl``."""

    sample_index: int = Field(ge=0)
    sample_key: str = Field(min_length=1)
    scene_id: str = Field(min_length=1)
    snippet_id: str = Field(min_length=1)
    split: str = Field(min_length=1)
    shard_id: str
    row: int = Field(ge=0)


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


# --------------------------------------------------------------------------------------
# Parsing with errors that point at the file, line and field
# --------------------------------------------------------------------------------------


def _loc_text(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def format_validation_error(error: ValidationError) -> tuple[str, str]:
    """``(location, message)`` for the first problem in a Pydantic error, in spec field names."""
    first = error.errors(include_url=False)[0]
    loc = _loc_text(first["loc"])
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first["type"] == "missing":
        msg = "required field is missing"
    elif first["type"] == "extra_forbidden":
        msg = "field is not part of format v1"
    elif "input" in first and first["type"] not in {"value_error", "assertion_error"}:
        msg = f"{msg}, found {first['input']!r}"
    more = len(error.errors()) - 1
    if more:
        msg = f"{msg} (and {more} more problem{'s' if more > 1 else ''})"
    return loc or "(top level)", msg


def sample_index_byte_limit(num_samples: int) -> int:
    """Most bytes a ``sample_index.jsonl`` of ``num_samples`` lines may have."""
    return max(1, num_samples) * (MAX_SAMPLE_INDEX_LINE_BYTES + 1)


def _json_loads(
    data: bytes | str,
    error: type[VinOfflineStoreError],
    path: str,
    where: str | None,
    expected: str,
) -> Any:
    """``json.loads`` whose every failure is ``error`` naming the file.

    Deep nesting (``RecursionError``) and numbers longer than Python converts
    (``ValueError``) are damage like any other bad JSON, not a builtin crash.
    """
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        at = where or (f"line {line}" if line else None)
        raise error(f"not valid JSON: {exc}", path=path, location=at, expected=expected) from exc
    except RecursionError:
        raise error(
            "JSON nested too deeply to parse", path=path, location=where, expected=expected
        ) from None
    except ValueError as exc:  # e.g. an integer of more digits than int() accepts
        raise error(
            f"unparsable JSON value ({exc})", path=path, location=where, expected=expected
        ) from None


def parse_manifest(data: bytes, *, path: str) -> VinOfflineManifest:
    """Parse and validate ``manifest.json`` bytes; ``path`` is only used in error messages.

    ``format`` and ``version`` are checked first so that a store of another format or a
    future version is refused as such, not as a pile of unrelated schema errors. More than
    :data:`MAX_MANIFEST_BYTES` is refused before parsing.
    """
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"larger than the {MAX_MANIFEST_BYTES} bytes a manifest may have",
            path=path,
            expected=f"at most {MAX_MANIFEST_BYTES} bytes",
        )
    raw = _json_loads(data, ManifestError, path, None, "a JSON object")
    if not isinstance(raw, dict):
        raise ManifestError(
            f"top level is a {type(raw).__name__}", path=path, expected="a JSON object"
        )
    fmt = raw.get("format")
    if fmt != STORE_FORMAT:
        raise UnsupportedFormatError(
            f"unsupported format {fmt!r}",
            path=path,
            location="format",
            expected=f"one of: {STORE_FORMAT!r}",
        )
    version = raw.get("version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        raise UnsupportedFormatError(
            f"unsupported version {version!r}",
            path=path,
            location="version",
            expected=f"one of: {supported}",
        )
    try:
        return VinOfflineManifest.model_validate_json(data)
    except ValidationError as exc:
        loc, msg = format_validation_error(exc)
        raise ManifestError(msg, path=path, location=f"field {loc}") from exc


def parse_sample_index_line(line: bytes | str, *, path: str, line_number: int) -> SampleIndexRow:
    """Parse one ``sample_index.jsonl`` line (1-based ``line_number`` for messages)."""
    where = f"line {line_number}"
    if len(line) > MAX_SAMPLE_INDEX_LINE_BYTES:
        raise SampleIndexError(
            f"line of {len(line)} bytes",
            path=path,
            location=where,
            expected=f"lines of at most {MAX_SAMPLE_INDEX_LINE_BYTES} bytes",
        )
    raw = _json_loads(line, SampleIndexError, path, where, "one JSON object per line")
    if not isinstance(raw, dict):
        raise SampleIndexError(
            f"line holds a {type(raw).__name__}",
            path=path,
            location=where,
            expected="a JSON object",
        )
    try:
        return SampleIndexRow.model_validate_json(line)
    except ValidationError as exc:
        loc, msg = format_validation_error(exc)
        raise SampleIndexError(msg, path=path, location=f"{where}, field {loc}") from exc


_SAMPLE_ROWS: Final = TypeAdapter(list[SampleIndexRow])


def parse_sample_index(
    data: bytes, *, path: str, manifest: VinOfflineManifest | None = None
) -> tuple[SampleIndexRow, ...]:
    """Parse ``sample_index.jsonl`` and, given the manifest, cross-check it.

    Checks: ``sample_index`` runs 0, 1, 2, ... without gaps or duplicates; ``sample_key`` is
    unique; with a manifest: the line count equals ``num_samples``, every ``shard_id`` is
    declared, every ``row`` is inside its shard, and no shard row is claimed twice.
    """
    keys: dict[str, int] = {}
    if manifest is not None and len(data) > sample_index_byte_limit(manifest.num_samples):
        raise SampleIndexError(
            f"larger than {manifest.num_samples} lines of at most "
            f"{MAX_SAMPLE_INDEX_LINE_BYTES} bytes can be",
            path=path,
            expected=f"num_samples={manifest.num_samples} lines",
        )
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    # Fast path: validate all lines in one call; any problem re-parses line by line so the
    # error names the line.
    longest = max(map(len, lines), default=0)
    if longest > MAX_SAMPLE_INDEX_LINE_BYTES:
        number = next(i for i, line in enumerate(lines, 1) if len(line) == longest)
        parse_sample_index_line(lines[number - 1], path=path, line_number=number)
    bulk: list[SampleIndexRow] | None
    try:
        bulk = _SAMPLE_ROWS.validate_json(b"[" + b",".join(lines) + b"]")
    except ValidationError:
        bulk = None
    if bulk is None or len(bulk) != len(lines):
        bulk = None
    rows: list[SampleIndexRow] = []
    for number, line in enumerate(lines, start=1):
        if bulk is not None:
            row = bulk[number - 1]
        elif not line.strip():
            raise SampleIndexError(
                "blank line",
                path=path,
                location=f"line {number}",
                expected="one JSON object per line",
            )
        else:
            row = parse_sample_index_line(line, path=path, line_number=number)
        expected_index = number - 1
        if row.sample_index != expected_index:
            kind = "duplicate" if row.sample_index < expected_index else "gap before"
            raise SampleIndexError(
                f"{kind} sample_index {row.sample_index}",
                path=path,
                location=f"line {number}, field sample_index",
                expected=f"sample_index {expected_index} (ascending from 0 without gaps)",
            )
        if row.sample_key in keys:
            raise SampleIndexError(
                f"sample_key {row.sample_key!r} already used on line {keys[row.sample_key]}",
                path=path,
                location=f"line {number}, field sample_key",
                expected="unique sample keys",
            )
        keys[row.sample_key] = number
        rows.append(row)
    if manifest is not None:
        check_sample_index_against_manifest(rows, manifest, path=path)
    return tuple(rows)


def check_sample_index_against_manifest(
    rows: Sequence[SampleIndexRow], manifest: VinOfflineManifest, *, path: str
) -> None:
    """Raise :class:`SampleIndexError` when the index and manifest disagree."""
    if len(rows) != manifest.num_samples:
        raise SampleIndexError(
            f"{len(rows)} lines but manifest.json says num_samples={manifest.num_samples}",
            path=path,
            expected=f"{manifest.num_samples} lines",
        )
    num_rows: Mapping[str, int] = {s.shard_id: s.num_rows for s in manifest.shards}
    claimed: dict[tuple[str, int], int] = {}
    for number, row in enumerate(rows, start=1):
        if row.shard_id not in num_rows:
            raise SampleIndexError(
                f"unknown shard_id {row.shard_id!r}",
                path=path,
                location=f"line {number}, field shard_id",
                expected=f"one of the manifest's shards {list(num_rows)[:8]}",
            )
        if row.row >= num_rows[row.shard_id]:
            raise SampleIndexError(
                f"row {row.row} is out of range for shard {row.shard_id!r}",
                path=path,
                location=f"line {number}, field row",
                expected=f"0 <= row < {num_rows[row.shard_id]}",
            )
        where = (row.shard_id, row.row)
        if where in claimed:
            raise SampleIndexError(
                f"shard {row.shard_id!r} row {row.row} already used on line {claimed[where]}",
                path=path,
                location=f"line {number}, field row",
                expected="each shard row used by one sample",
            )
        claimed[where] = number
