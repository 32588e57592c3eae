"""The Pydantic models of the contract: the store config, the manifest with its shards and
blocks, and one ``sample_index.jsonl`` row.

Part of :mod:`vinlens.store.format` (its docstring maps the package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from vinlens.store.format._contract import (
    NUMERIC_DTYPES,
    SHARD_ID_PATTERN,
    STORE_FORMAT,
    SUPPORTED_VERSIONS,
    BlockKind,
    block_name_problem,
    normalize_location,
)


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
        if not SHARD_ID_PATTERN.match(value):
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
