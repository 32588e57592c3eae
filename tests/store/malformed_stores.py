"""The table of malformed stores: how to break a good store, and the error that must name the file.

Shared by the store tests and importable by other store test modules
(``from malformed_stores import MALFORMED_CASES``). Each case mutates a freshly written
synthetic store (``SyntheticStoreSpec(seed=7)``: shards ``00000``-``00002`` of 8 rows,
16 candidates) and says which error class is expected, which file the message must name
(relative to the store) and a phrase it must contain.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vinlens.store.format import (
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    SampleIndexError,
    StoreNotFoundError,
    UnsupportedFormatError,
    VinOfflineStoreError,
)


@dataclass(frozen=True)
class MalformedCase:
    name: str
    mutate: Callable[[Path], None]
    error: type[VinOfflineStoreError]
    names_file: str
    phrase: str
    # "open": raised by VinOfflineStoreReader(...); "validate": by reader.validate();
    # "read": only when the damaged bytes are decoded (reading every sample).
    stage: str


def _edit_manifest(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def mutate(store: Path) -> None:
        path = store / "manifest.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))

    return mutate


def _edit_index(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def mutate(store: Path) -> None:
        path = store / "sample_index.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join(edit(lines)) + "\n")

    return mutate


def _set_line_field(number: int, key: str, value: object) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        row = json.loads(lines[number - 1])
        row[key] = value
        lines[number - 1] = json.dumps(row)
        return lines

    return edit


def _block(data: dict, shard: int, name: str) -> dict:
    return next(b for b in data["shards"][shard]["blocks"] if b["name"] == name)


def _truncate(rel: str, by: int) -> Callable[[Path], None]:
    def mutate(store: Path) -> None:
        path = store / rel
        data = path.read_bytes()
        path.write_bytes(data[:-by])

    return mutate


def _set_offset(index: int, value: int) -> Callable[[Path], None]:
    def mutate(store: Path) -> None:
        path = store / "shards/00000/records/vin_points.offsets"
        offsets = np.fromfile(path, dtype="<u8")
        offsets[index] = value
        offsets.tofile(path)

    return mutate


def _overwrite_first_record(store: Path) -> None:
    path = store / "shards/00000/records/vin_points.msgpack"
    data = bytearray(path.read_bytes())
    data[0] = 0xC1  # the one byte msgpack never uses
    path.write_bytes(bytes(data))


MALFORMED_CASES: tuple[MalformedCase, ...] = (
    MalformedCase(
        "missing manifest",
        lambda s: (s / "manifest.json").unlink(),
        StoreNotFoundError,
        "manifest.json",
        "missing",
        "open",
    ),
    MalformedCase(
        "manifest not JSON",
        lambda s: (s / "manifest.json").write_text('{"format": "vin-offline-store",\n  oops'),
        ManifestError,
        "manifest.json",
        "line 2",
        "open",
    ),
    MalformedCase(
        "manifest field of the wrong type",
        _edit_manifest(lambda d: d["shards"][1].__setitem__("num_rows", "8")),
        ManifestError,
        "manifest.json",
        "shards[1].num_rows",
        "open",
    ),
    MalformedCase(
        "manifest field missing",
        _edit_manifest(lambda d: d.pop("num_candidates")),
        ManifestError,
        "manifest.json",
        "num_candidates",
        "open",
    ),
    MalformedCase(
        "wrong format",
        _edit_manifest(lambda d: d.__setitem__("format", "vin-store")),
        UnsupportedFormatError,
        "manifest.json",
        "'vin-offline-store'",
        "open",
    ),
    MalformedCase(
        "wrong version",
        _edit_manifest(lambda d: d.__setitem__("version", 2)),
        UnsupportedFormatError,
        "manifest.json",
        "expected one of: 1",
        "open",
    ),
    MalformedCase(
        "missing shard directory",
        lambda s: shutil.rmtree(s / "shards/00001"),
        MissingShardError,
        "shards/00001",
        "no directory",
        "validate",
    ),
    MalformedCase(
        "missing zarr block",
        lambda s: shutil.rmtree(s / "shards/00000/arrays/rri"),
        MissingBlockError,
        "shards/00000/arrays/rri/zarr.json",
        "missing",
        "validate",
    ),
    MalformedCase(
        "missing record block file",
        lambda s: (s / "shards/00002/records/vin_points.offsets").unlink(),
        MissingBlockError,
        "shards/00002/records/vin_points.offsets",
        "missing",
        "validate",
    ),
    MalformedCase(
        "block shape differs from manifest",
        _edit_manifest(
            lambda d: _block(d, 0, "backbone.global_features").__setitem__("shape", [8, 33])
        ),
        BlockMismatchError,
        "shards/00000/arrays/backbone.global_features",
        "shape [8, 33]",
        "validate",
    ),
    MalformedCase(
        "block dtype differs from manifest",
        _edit_manifest(
            lambda d: _block(d, 1, "backbone.voxel_features").__setitem__("dtype", "float32")
        ),
        BlockMismatchError,
        "shards/00001/arrays/backbone.voxel_features",
        "dtype float32",
        "validate",
    ),
    MalformedCase(
        "manifest dtype against the spec table",
        _edit_manifest(lambda d: _block(d, 0, "rri").__setitem__("dtype", "float64")),
        ManifestError,
        "manifest.json",
        "shards[0].blocks[2]",
        "open",
    ),
    MalformedCase(
        "truncated msgpack",
        _truncate("shards/00000/records/vin_points.msgpack", 10),
        CorruptRecordError,
        "shards/00000/records/vin_points.msgpack",
        "truncated",
        "validate",
    ),
    MalformedCase(
        "offsets out of range",
        _set_offset(3, 1 << 40),
        CorruptRecordError,
        "shards/00000/records/vin_points.offsets",
        "out of range",
        "validate",
    ),
    MalformedCase(
        "offsets decreasing",
        _set_offset(3, 1),
        CorruptRecordError,
        "shards/00000/records/vin_points.offsets",
        "smaller than offset 2",
        "validate",
    ),
    MalformedCase(
        "offsets file of the wrong length",
        _truncate("shards/00001/records/vin_points.offsets", 8),
        CorruptRecordError,
        "shards/00001/records/vin_points.offsets",
        "has 64 bytes",
        "validate",
    ),
    MalformedCase(
        "corrupt msgpack record",
        _overwrite_first_record,
        CorruptRecordError,
        "shards/00000/records/vin_points.msgpack",
        "record 0",
        "read",
    ),
    MalformedCase(
        "missing zarr chunk",
        lambda s: (s / "shards/00002/arrays/candidate_valid/c/0/0").unlink(),
        MissingChunksError,
        "shards/00002/arrays/candidate_valid",
        "c/0/0",
        "validate",
    ),
    MalformedCase(
        # An uncompressed chunk's size is known from its listing: validate reports it
        # (issue 23, class 8), as reads and statistics refuse it.
        "truncated zarr chunk",
        _truncate("shards/00001/arrays/rri/c/0/0", 4),
        CorruptChunkError,
        "shards/00001/arrays/rri",
        "cannot decode",
        "validate",
    ),
    MalformedCase(
        "gap in sample_index",
        _edit_index(lambda lines: lines[:4] + lines[5:]),
        SampleIndexError,
        "sample_index.jsonl",
        "line 5",
        "open",
    ),
    MalformedCase(
        "duplicate sample_index",
        _edit_index(lambda lines: [*lines[:5], lines[4], *lines[5:]]),
        SampleIndexError,
        "sample_index.jsonl",
        "duplicate sample_index 4",
        "open",
    ),
    MalformedCase(
        "unknown shard id",
        _edit_index(_set_line_field(3, "shard_id", "00042")),
        SampleIndexError,
        "sample_index.jsonl",
        "unknown shard_id '00042'",
        "open",
    ),
    MalformedCase(
        "row out of range",
        _edit_index(_set_line_field(2, "row", 8)),
        SampleIndexError,
        "sample_index.jsonl",
        "row 8 is out of range",
        "open",
    ),
    MalformedCase(
        "sample_index line not JSON",
        _edit_index(lambda lines: [*lines[:6], "{oops", *lines[7:]]),
        SampleIndexError,
        "sample_index.jsonl",
        "line 7",
        "open",
    ),
    MalformedCase(
        "missing sample_index",
        lambda s: (s / "sample_index.jsonl").unlink(),
        SampleIndexError,
        "sample_index.jsonl",
        "missing",
        "open",
    ),
)
