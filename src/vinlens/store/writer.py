"""Write an immutable VIN offline store and publish it atomically.

Usage::

    with VinOfflineStoreWriter(path, num_candidates=64, rows_per_shard=256) as writer:
        for sample in samples:          # VinOfflineSample, numpy arrays
            writer.add(sample)          # or writer.add_batch(samples)
    # leaving the block publishes; an exception inside it discards everything

The store is built in a sibling temporary directory (same file system) and published with
one ``rename``; ``manifest.json`` is written last, inside the temporary directory, so a
directory at the final path is always complete. An existing path is refused unless
``replace=True``; replacing swaps the new store and the old one in one atomic
``renameat2(RENAME_EXCHANGE)`` on Linux (elsewhere, or on a file system without it: moves
the old store aside, renames the new one in) and then deletes the old one, so an
interrupted write leaves the old store or the complete new one at the path (plus, after
SIGKILL, a hidden ``.<name>.vinlens-tmp-*`` sibling to delete: the unfinished new store or
the half-deleted old one).

Zarr blocks are buffered per shard and written when the shard is complete, in chunks of
about ``chunk_bytes`` (1 MiB) along the row axis (inner axes are split only when one row
is larger than that), uncompressed by default. Every chunk file is written, including
all-fill chunks (``write_empty_chunks``), so that a missing file always means damage.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import numpy as np

from vinlens.store._publish import check_target, fsync_tree, publish
from vinlens.store.errors import (
    InvalidSampleError,
    StoreVerificationError,
    VinOfflineStoreError,
)
from vinlens.store.format import (
    BACKBONE_DTYPES,
    BACKBONE_PREFIX,
    MANIFEST_FILE,
    RRI_COMPONENT_PREFIX,
    SAMPLE_INDEX_FILE,
    STORE_FORMAT,
    BlockKind,
    Capabilities,
    MaterializedBlocks,
    StoreBlockSpec,
    StoreShardSpec,
    VinOfflineManifest,
    VinOfflineSample,
    arrays_dir,
    block_name_problem,
    encode_record,
    record_paths,
    shard_dir,
)

__all__ = ["DEFAULT_CHUNK_BYTES", "VinOfflineStoreWriter", "chunk_shape_for"]

DEFAULT_CHUNK_BYTES = 1 << 20
_TMP_MARKER = ".vinlens-tmp-"


def chunk_shape_for(
    shape: tuple[int, ...], itemsize: int, target_bytes: int = DEFAULT_CHUNK_BYTES
) -> tuple[int, ...]:
    """Chunk shape of about ``target_bytes``: whole rows when a row fits, else split inner axes.

    Rows are the unit a reader asks for, so chunks span as many whole rows as fit; a row
    larger than the target is split along its leading inner axes.
    """
    dims = [max(1, n) for n in shape]
    row_bytes = math.prod(dims[1:]) * itemsize
    if row_bytes <= target_bytes:
        return (max(1, min(dims[0], target_bytes // max(1, row_bytes))), *dims[1:])
    chunk = [1, *dims[1:]]
    for axis in range(1, len(chunk)):
        if math.prod(chunk) * itemsize <= target_bytes:
            break
        rest = math.prod(chunk[axis + 1 :]) * itemsize
        chunk[axis] = max(1, min(chunk[axis], target_bytes // rest)) if rest <= target_bytes else 1
    return tuple(chunk)


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


_INT64 = np.iinfo(np.int64)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _beyond_float32(arr: np.ndarray) -> bool:
    """True when a wider float array holds finite values that float32 would turn into inf."""
    if arr.dtype.itemsize <= 4 or arr.size == 0:
        return False
    magnitude = np.abs(arr[np.isfinite(arr)])
    return bool(magnitude.size) and float(magnitude.max()) > _FLOAT32_MAX


def _beyond_int64(arr: np.ndarray) -> bool:
    """True when an integer array holds values outside int64 (uint64 above 2**63 - 1)."""
    if arr.size == 0 or np.can_cast(arr.dtype, np.int64):
        return False
    return bool(arr.max() > _INT64.max) or bool(arr.min() < _INT64.min)


class _ShardBuffer:
    """Rows of the shard being written: zarr rows in memory, records streamed to disk."""

    def __init__(
        self, shard_id: str, root: Path, signature: dict[str, tuple[tuple[int, ...], str]]
    ) -> None:
        self.shard_id = shard_id
        self.signature = signature
        self.zarr_rows: dict[str, list[np.ndarray]] = {name: [] for name in signature}
        self.num_rows = 0
        msgpack_rel, _ = record_paths(shard_id, "vin_points")
        self.records_path = root / msgpack_rel
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        self.records_file: IO[bytes] = open(self.records_path, "wb")  # noqa: SIM115 - closed in finish/abort
        self.offsets: list[int] = [0]

    def close_files(self) -> None:
        if not self.records_file.closed:
            self.records_file.close()


class VinOfflineStoreWriter:
    """Context manager that writes samples into a new store and publishes it atomically.

    ``num_candidates`` is ``C`` of every per-candidate array. ``scene_labels`` false makes
    an unlabelled store (no ``candidate_valid``/``rri``/components/ids allowed).
    ``rows_per_shard`` rolls shards; :meth:`finish_shard` ends one early (needed when the
    next samples store a different set of optional blocks, since all rows of a shard
    share one block set). ``replace=True`` atomically replaces an existing *store* at the
    path (a directory that is not a VIN store is never replaced). ``compressor`` is
    ``None`` (raw little-endian chunks) or ``"zstd"``. ``fsync`` flushes every file and
    directory before the publishing rename so a power cut cannot publish torn files.
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        num_candidates: int,
        scene_labels: bool = True,
        rows_per_shard: int = 256,
        replace: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        compressor: Literal["zstd"] | None = None,
        fsync: bool = True,
    ) -> None:
        if num_candidates < 0:
            raise ValueError(f"num_candidates must be >= 0, got {num_candidates}")
        if rows_per_shard < 1:
            raise ValueError(f"rows_per_shard must be >= 1, got {rows_per_shard}")
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        if compressor not in (None, "zstd"):
            raise ValueError(f"compressor must be None or 'zstd', got {compressor!r}")
        self.store_dir = Path(store_dir).expanduser().absolute()
        self.num_candidates = num_candidates
        self.scene_labels = scene_labels
        self.rows_per_shard = rows_per_shard
        self.replace = replace
        self.chunk_bytes = chunk_bytes
        self.compressor = compressor
        self.fsync = fsync
        check_target(self.store_dir, self.replace)
        self.store_dir.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = (
            self.store_dir.parent
            / f".{self.store_dir.name}{_TMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        self._tmp.mkdir()
        self._index_file: IO[str] = open(self._tmp / SAMPLE_INDEX_FILE, "w", encoding="utf-8")  # noqa: SIM115
        self._shards: list[StoreShardSpec] = []
        self._shard: _ShardBuffer | None = None
        self._keys: set[str] = set()
        self._num_samples = 0
        self._state: Literal["open", "published", "aborted"] = "open"

    # ---- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> VinOfflineStoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif self._state == "open":
            self.close()

    @property
    def num_samples(self) -> int:
        return self._num_samples

    @property
    def temp_dir(self) -> Path:
        """Where the store is being built (a sibling of ``store_dir``)."""
        return self._tmp

    def _require_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"{self.store_dir}: writer is already {self._state}")

    def abort(self) -> None:
        """Discard everything written so far; the path keeps whatever it had before."""
        if self._state != "open":
            return
        self._state = "aborted"
        if self._shard is not None:
            self._shard.close_files()
        with contextlib.suppress(OSError):
            self._index_file.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def close(self) -> Path:
        """Finish the last shard, write the manifest and publish; returns the store path."""
        if self._state == "published":
            return self.store_dir
        self._require_open()
        try:
            self.finish_shard()
            self._index_file.close()
            manifest = self._manifest()
            (self._tmp / MANIFEST_FILE).write_text(
                json.dumps(manifest.to_json_dict(), indent=2) + "\n", encoding="utf-8"
            )
            self._verify()
            if self.fsync:
                fsync_tree(self._tmp)
            publish(self._tmp, self.store_dir, replace=self.replace, fsync=self.fsync)
        except BaseException:
            self.abort()
            raise
        self._state = "published"
        return self.store_dir

    def _verify(self) -> None:
        """Open the built store with the reader (manifest, index, one sample per shard).

        A store its own reader refuses is never published: the path keeps what it had
        (for ``replace=True`` the old, good store).
        """
        from vinlens.store.reader import VinOfflineStoreReader

        try:
            with VinOfflineStoreReader(self._tmp) as reader:
                first: dict[str, int] = {}
                for row in reader.samples:
                    if row.row == 0:
                        first.setdefault(row.shard_id, row.sample_index)
                for shard in reader.manifest.shards:
                    if shard.num_rows:
                        reader.read_sample(first[shard.shard_id])
        except (VinOfflineStoreError, OSError, KeyError) as exc:
            raise StoreVerificationError(
                f"the new store failed its read-back check, nothing was published ({exc})",
                path=self.store_dir,
                expected="a store the vinlens reader opens",
            ) from exc

    # ---- samples ------------------------------------------------------------------------

    def _invalid(self, key: object, where: str, message: str, expected: str) -> InvalidSampleError:
        return InvalidSampleError(
            message, path=self.store_dir, location=f"sample {key!r}, {where}", expected=expected
        )

    def _numeric(self, key: object, where: str, value: object) -> np.ndarray:
        """``value`` as a numpy array of a numeric or bool dtype (never object or text)."""
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise self._invalid(
                key, where, f"cannot be read as an array ({exc})", "a numeric numpy array"
            ) from None
        if arr.dtype.kind not in "biuf":
            raise self._invalid(key, where, f"has dtype {arr.dtype}", "a numeric numpy array")
        return arr

    def _check_identity(self, sample: VinOfflineSample) -> None:
        """The index fields: non-empty strings that JSON can carry as UTF-8."""
        if not isinstance(sample, VinOfflineSample):
            raise InvalidSampleError(
                f"got a {type(sample).__name__}",
                path=self.store_dir,
                expected="a vinlens.store.VinOfflineSample",
            )
        key = sample.sample_key
        for field_name in ("sample_key", "scene_id", "snippet_id", "split"):
            value = getattr(sample, field_name)
            expected = "a non-empty str of valid Unicode text"
            if not isinstance(value, str):
                raise self._invalid(
                    key, f"field {field_name}", f"is a {type(value).__name__}", expected
                )
            if not value:
                raise self._invalid(key, f"field {field_name}", "is empty", expected)
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise self._invalid(
                    key, f"field {field_name}", f"{value!r} is not valid Unicode", expected
                ) from None
        for label, mapping in (
            ("rri_components", sample.rri_components),
            ("backbone", sample.backbone),
        ):
            for name in mapping:
                problem = block_name_problem(name)
                if problem is not None:
                    raise self._invalid(
                        key, f"{label} name", problem, "a name the spec allows as a block name"
                    )

    def _row_arrays(self, sample: VinOfflineSample) -> dict[str, np.ndarray]:
        key = sample.sample_key
        c = self.num_candidates
        blocks = sample.zarr_blocks()
        labelled = [
            n
            for n in blocks
            if n in {"candidate_valid", "rri", "candidate_ids"}
            or n.startswith(RRI_COMPONENT_PREFIX)
        ]
        if not self.scene_labels and labelled:
            raise ValueError(
                f"sample {key!r}: labelled blocks {labelled} in a store written with scene_labels=False"
            )
        if self.scene_labels and (sample.candidate_valid is None or sample.rri is None):
            raise ValueError(f"sample {key!r}: a labelled store needs candidate_valid and rri")
        out: dict[str, np.ndarray] = {}
        for name, value in blocks.items():
            arr = self._numeric(key, f"block {name!r}", value)
            if name == "candidate_valid":
                want: tuple[tuple[int, ...], str] = ((c,), "bool")
            elif name in {"rri"} or name.startswith(RRI_COMPONENT_PREFIX):
                want = ((c,), "float32")
            elif name == "candidate_ids":
                want = ((c,), "int64")
            elif name == "candidate_poses":
                want = ((c, 7), "float32")
            else:  # backbone field
                if arr.dtype.name not in BACKBONE_DTYPES:
                    raise ValueError(
                        f"sample {key!r}: block {name!r} has dtype {arr.dtype}; expected float16 or float32"
                    )
                want = (arr.shape, arr.dtype.name)
            shape, dtype = want
            if arr.shape != shape:
                raise ValueError(
                    f"sample {key!r}: block {name!r} has shape {list(arr.shape)}, expected {list(shape)}"
                )
            if dtype == "bool" and arr.dtype != np.bool_:
                raise ValueError(
                    f"sample {key!r}: block {name!r} has dtype {arr.dtype}, expected bool"
                )
            if dtype == "int64" and not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(
                    f"sample {key!r}: block {name!r} has dtype {arr.dtype}, expected an integer dtype"
                )
            if dtype == "float32" and not np.issubdtype(arr.dtype, np.floating):
                raise ValueError(
                    f"sample {key!r}: block {name!r} has dtype {arr.dtype}, expected a float dtype"
                )
            if dtype == "int64" and _beyond_int64(arr):
                raise self._invalid(
                    key,
                    f"block {name!r}",
                    f"{arr.dtype} values up to {arr.max()} do not fit int64",
                    f"values in [{_INT64.min}, {_INT64.max}]",
                )
            if arr.dtype.kind == "f" and _beyond_float32(arr) and (dtype == "float32"):
                raise self._invalid(
                    key,
                    f"block {name!r}",
                    f"finite {arr.dtype} values beyond the float32 range would become inf",
                    f"|value| <= {_FLOAT32_MAX:.6g} (or inf/NaN given as such)",
                )
            out[name] = arr.astype(dtype, copy=False)
        return out

    def add(self, sample: VinOfflineSample) -> int:
        """Append one sample; returns its ``sample_index``."""
        self._require_open()
        self._check_identity(sample)
        if sample.sample_key in self._keys:
            raise ValueError(f"sample_key {sample.sample_key!r} was already written")
        points = self._numeric(sample.sample_key, "vin_points", sample.vin_points)
        if points.ndim != 2 or points.shape[1] != 3 or points.dtype.kind != "f":
            raise self._invalid(
                sample.sample_key,
                "vin_points",
                f"is {points.dtype} {list(points.shape)}",
                "a float array [n, 3]",
            )
        if _beyond_float32(points):
            raise self._invalid(
                sample.sample_key,
                "vin_points",
                f"finite {points.dtype} values beyond the float32 range would become inf",
                f"|value| <= {_FLOAT32_MAX:.6g}",
            )
        rows = self._row_arrays(sample)
        signature = {name: (arr.shape, arr.dtype.name) for name, arr in rows.items()}
        if self._shard is not None and self._shard.signature != signature:
            raise ValueError(
                f"sample {sample.sample_key!r} stores blocks {sorted(signature)} but shard "
                f"{self._shard.shard_id} stores {sorted(self._shard.signature)}; call finish_shard() "
                "before changing the set (or shapes) of optional blocks"
            )
        if self._shard is None:
            self._shard = _ShardBuffer(f"{len(self._shards):05d}", self._tmp, signature)
        shard = self._shard
        record = encode_record({"points": points.astype(np.float32, copy=False)})
        shard.records_file.write(record)
        shard.offsets.append(shard.offsets[-1] + len(record))
        for name, arr in rows.items():
            shard.zarr_rows[name].append(arr)
        entry = {
            "sample_index": self._num_samples,
            "sample_key": sample.sample_key,
            "scene_id": sample.scene_id,
            "snippet_id": sample.snippet_id,
            "split": sample.split,
            "shard_id": shard.shard_id,
            "row": shard.num_rows,
        }
        self._index_file.write(json.dumps(entry, separators=(", ", ": ")) + "\n")
        self._keys.add(sample.sample_key)
        shard.num_rows += 1
        self._num_samples += 1
        if shard.num_rows >= self.rows_per_shard:
            self.finish_shard()
        return self._num_samples - 1

    def add_batch(self, samples: Iterable[VinOfflineSample]) -> list[int]:
        """Append several samples; returns their sample indices."""
        return [self.add(sample) for sample in samples]

    def finish_shard(self) -> None:
        """Write the current shard's zarr arrays and offsets; the next sample starts a new shard."""
        self._require_open()
        shard = self._shard
        if shard is None:
            return
        self._shard = None
        shard.close_files()
        import zarr

        root = self._tmp
        rows = shard.num_rows
        group = zarr.open_group(root / arrays_dir(shard.shard_id), mode="w", zarr_format=3)
        blocks: list[StoreBlockSpec] = []
        for name, row_arrays in shard.zarr_rows.items():
            data = np.stack(row_arrays)
            row_arrays.clear()
            chunks = chunk_shape_for(data.shape, data.dtype.itemsize, self.chunk_bytes)
            compressors: Any = None
            if self.compressor == "zstd":
                from zarr.codecs import ZstdCodec

                compressors = ZstdCodec(level=1)
            array = group.create_array(
                name,
                shape=data.shape,
                dtype=data.dtype,
                chunks=chunks,
                compressors=compressors,
                config={"write_empty_chunks": True},
            )
            array[...] = data
            blocks.append(
                StoreBlockSpec(
                    name=name,
                    kind=BlockKind.ZARR_ARRAY,
                    dtype=data.dtype.name,
                    shape=tuple(int(n) for n in data.shape),
                    optional=not self._required(name),
                )
            )
            del data
        _, offsets_rel = record_paths(shard.shard_id, "vin_points")
        np.asarray(shard.offsets, dtype="<u8").tofile(root / offsets_rel)
        blocks.insert(
            0,
            StoreBlockSpec(
                name="vin_points",
                kind=BlockKind.MSGPACK_INDEXED_RECORDS,
                dtype=None,
                shape=(rows,),
                optional=False,
            ),
        )
        (root / shard_dir(shard.shard_id)).mkdir(parents=True, exist_ok=True)
        self._shards.append(
            StoreShardSpec(shard_id=shard.shard_id, num_rows=rows, blocks=tuple(blocks))
        )

    def _required(self, name: str) -> bool:
        return name == "vin_points" or (self.scene_labels and name in {"candidate_valid", "rri"})

    def _manifest(self) -> VinOfflineManifest:
        names = {block.name for shard in self._shards for block in shard.blocks}
        flags: Mapping[str, bool] = {
            "backbone": any(n.startswith(BACKBONE_PREFIX) for n in names),
            "rri_components": any(n.startswith(RRI_COMPONENT_PREFIX) for n in names),
            "candidate_ids": "candidate_ids" in names,
            "candidate_poses": "candidate_poses" in names,
        }
        return VinOfflineManifest(
            format=STORE_FORMAT,
            version=1,
            created_at=_utc_now(),
            num_samples=self._num_samples,
            num_candidates=self.num_candidates,
            capabilities=Capabilities(scene_labels=self.scene_labels),
            materialized_blocks=MaterializedBlocks(**flags),
            shards=tuple(self._shards),
        )
