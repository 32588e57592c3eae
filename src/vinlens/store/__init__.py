"""VIN offline store v1: format, read-only access, reader, writer, torch dataset, synthetic data.

The normative format is ``docs/store-format.md``. Public API (stable; every change is
recorded in ``CHANGELOG.md``):

Format (:mod:`vinlens.store.format`)
    ``VinOfflineStoreConfig(store_dir: Path | str, raw_dataset_dir: Path | str | None = None,
    storage_options: dict | None = None)`` frozen Pydantic model; the ``store`` argument of
        every reader/diagnostics function. Local paths stay ``~``-expanded ``Path`` objects;
        fsspec URLs (``s3://``, ``gs://``, ``memory://``) stay strings; ``file://`` is local;
        ``storage_options`` go to fsspec. ``is_url(location)``, ``normalize_location(location)``.
    ``VinOfflineManifest`` (``format, version, created_at, num_samples, num_candidates,
    capabilities: Capabilities(scene_labels), materialized_blocks: MaterializedBlocks(backbone,
    rri_components, candidate_ids, candidate_poses), shards: tuple[StoreShardSpec, ...]``;
    ``.shard(id)``, ``.shard_ids``, ``.block_names()``),
    ``StoreShardSpec(shard_id, num_rows, blocks)`` (``.block(name) -> StoreBlockSpec | None``),
    ``StoreBlockSpec(name, kind: BlockKind, dtype: str | None, shape: tuple[int, ...], optional)``
    (``.num_rows``, ``.row_shape``, ``.estimated_bytes`` -> int | None),
    ``BlockKind.ZARR_ARRAY | MSGPACK_INDEXED_RECORDS``,
    ``SampleIndexRow(sample_index, sample_key, scene_id, snippet_id, split, shard_id, row)``,
    ``parse_manifest(data: bytes, *, path: str)``, ``parse_sample_index(data, *, path, manifest=None)``,
    constants ``MANIFEST_FILE, SAMPLE_INDEX_FILE, BACKBONE_PREFIX ("backbone."),
    RRI_COMPONENT_PREFIX ("rri_components."), STORE_FORMAT, SUPPORTED_VERSIONS``,
    path helpers ``shard_dir(id)``, ``arrays_dir(id)``, ``record_paths(id, block) -> (msgpack, offsets)``.
    Errors (defined in :mod:`vinlens.store.errors`, one hierarchy under ``VinlensStoreError``;
    the contract errors subclass ``VinOfflineStoreError(ValueError)`` with ``.path``, ``.location``,
    ``.expected``; the message names file, line/field and expectation):
    ``StoreNotFoundError`` (also FileNotFoundError), ``ManifestError``,
    ``UnsupportedFormatError`` (a ManifestError), ``SampleIndexError``, ``MissingShardError``,
    ``MissingBlockError``, ``BlockMismatchError``, ``MissingChunksError``, ``CorruptChunkError``,
    ``CorruptRecordError``, ``StoreExistsError`` (also FileExistsError), ``StoreReplacedError``,
    ``SpecialFileError`` (also OSError: a FIFO/device/socket where a file belongs),
    ``InvalidSampleError`` (writer ``add()``: type, name or value range), ``StoreVerificationError``
    (a built store failed the writer's read-back check and was not published);
    ``block_name_problem(name) -> str | None``.

Access (:mod:`vinlens.store.access`) -- every file read of reader and diagnostics goes here
    ``open_store_access(location, storage_options=None) -> StoreAccess`` (``LocalStoreAccess``
    for paths and ``file://``, ``FsspecStoreAccess`` for other URLs; ``StoreAccessError``
    (OSError) names the URL on network/credential failures); ``StoreAccess``: ``root``,
    ``is_remote``, ``describe(rel)``,
    ``stat(rel="") -> FileStat(path, size, is_dir, mtime_ns, ctime_ns, device, inode, etag="",
    version="")``,
    ``exists(rel)``, ``list_dir(rel)``, ``walk_files(rel="", *, suffix=None)`` (sorted, recursive),
    ``walk_file_stats(rel="", *, suffix=None) -> Iterator[(rel, FileStat)]``,
    ``read_bytes(rel)``, ``read_bytes_with_stat(rel) -> (bytes, FileStat of that handle)``,
    ``read_bytes_limited(rel, limit)``,
    ``read_range(rel, start, length)``, ``open_binary(rel) -> IO[bytes]`` (seekable, read-only),
    ``zarr_store(rel)`` (read-only zarr store), ``close()``. Use it for raw tar dirs too.

Reader (:mod:`vinlens.store.reader`)
    ``VinOfflineStoreReader(store, *, access=None)`` / ``open_vin_offline_store(store, *, validate=False)``:
    attributes ``config, access, manifest, samples: tuple[SampleIndexRow, ...], generation:
    StoreGeneration, store_dir (absolute Path, or the URL string of a remote store), num_samples``; methods ``shard(id)``,
    ``block_spec(shard_id, name)``, ``rows_by_split()``, ``zarr_array(shard_id, name)``,
    ``chunk_status(shard_id, name) -> ChunkStatus``, ``missing_chunks()``,
    ``read_rows(shard_id, name, start, stop)``, ``read_row(shard_id, name, row)``,
    ``iter_row_batches(shard_id, name, *, max_bytes=1 MiB) -> Iterator[(first_row, ndarray)]``,
    ``record_offsets(shard_id, name)``, ``read_record(shard_id, name, row) -> dict``,
    ``iter_records(shard_id, name, start=0, stop=None, *, max_bytes=1 MiB) -> Iterator[(row, dict)]``,
    ``read_vin_points(shard_id, row)``, ``iter_vin_points(shard_id, start=0, stop=None)``,
    ``read_sample(sample_index) -> VinOfflineSample``, ``validate()``,
    ``integrity_problems() -> tuple[StoreIntegrityProblem(kind, shard_id, block, path, message), ...]``,
    ``check_generation()`` (raises StoreReplacedError), ``close()``, context manager.
    ``capture_store_generation(store_or_access) -> StoreGeneration(store_dir, manifest,
    sample_index, manifest_sha256)`` with ``.to_json_dict()``; ``as_store_config(store_or_path)``.
    ``ChunkStatus(shard_id, block, path, expected_chunks, initialized_chunks, missing_chunks,
    missing_examples)``.

Samples and records
    ``VinOfflineSample(sample_key, scene_id, snippet_id, split, vin_points, candidate_valid=None,
    rri=None, rri_components={}, candidate_ids=None, candidate_poses=None, backbone={})``
    (numpy; :mod:`vinlens.store.sample`); ``encode_record`` / ``decode_record``
    (:mod:`vinlens.store.records`).

Writer (:mod:`vinlens.store.writer`)
    ``VinOfflineStoreWriter(store_dir, *, num_candidates, scene_labels=True, rows_per_shard=256,
    replace=False, chunk_bytes=1 MiB, compressor=None | "zstd", fsync=True)``: context manager;
    ``add(sample) -> sample_index``, ``add_batch(samples) -> list[int]``, ``finish_shard()``,
    ``close() -> Path`` (publish), ``abort()``, ``temp_dir``, ``num_samples``.

Dataset (:mod:`vinlens.store.dataset`, imports torch)
    ``VinOfflineDataset(config, split=None)`` -> ``VinOracleSample`` (torch tensors + ids);
    ``.samples``, ``.available_splits``, ``.manifest``, ``.generation``, ``.reader()``;
    ``collate_vin_oracle_batch(samples) -> VinOracleBatch`` (``vin_points [B,N,3]``,
    ``vin_points_mask``, ``vin_points_lengths``, ``candidate_valid``, ``rri``, ``rri_components``,
    ``candidate_ids``, ``candidate_poses``, ``backbone``; ``.shapes()``, ``.tensors()``, ``.to()``).

Synthetic data (:mod:`vinlens.store.synthetic`)
    ``write_synthetic_store(store_dir, spec=SyntheticStoreSpec(), *, replace=False) ->
    SyntheticStoreRecord``; ``write_synthetic_raw_dataset(raw_dir, store_record,
    spec=SyntheticRawSpec()) -> SyntheticRawDatasetRecord`` (``missing_in_store``,
    ``outside_dataset``, ``covered``, ``unparseable_members``, ``long_name_members``, ...);
    ``write_synthetic_dataset(root, store_spec=None, raw_spec=None) -> SyntheticDatasetRecord``
    (``.config`` has store_dir and raw_dataset_dir); ``make_synthetic_samples(spec)``.

Compare (:mod:`vinlens.store.compare`)
    ``compare_vin_offline_stores(store_a, store_b, *, max_samples=512, executor=None,
    progress_cb=None) -> StoreComparison`` (``fields: tuple[FieldDrift, ...]``, ``field(name)``,
    ``most_drifted(metric="js_distance", k=5)``, sample/scene set differences, per-split counts
    and integrity problems of both stores); ``FieldDrift(name, count_a, count_b, mean_a, mean_b,
    std_a, std_b, psi, js_distance, wasserstein, ks_statistic, ...)``.

Command line (:mod:`vinlens.cli.store`, not imported by this package)
    ``vinlens store make-demo|info|stats|coverage``.

Changes to this API are recorded in ``CHANGELOG.md``.
"""

from __future__ import annotations

from vinlens.store.access import (
    FileStat,
    FsspecStoreAccess,
    LocalStoreAccess,
    StoreAccess,
    StoreAccessError,
    open_store_access,
)
from vinlens.store.compare import FieldDrift, StoreComparison, compare_vin_offline_stores
from vinlens.store.errors import VinlensStoreError
from vinlens.store.format import (
    BlockKind,
    BlockMismatchError,
    CorruptChunkError,
    CorruptRecordError,
    InvalidSampleError,
    ManifestError,
    MissingBlockError,
    MissingChunksError,
    MissingShardError,
    SampleIndexError,
    SampleIndexRow,
    SpecialFileError,
    StoreBlockSpec,
    StoreExistsError,
    StoreNotFoundError,
    StoreReplacedError,
    StoreShardSpec,
    StoreVerificationError,
    UnsupportedFormatError,
    VinOfflineManifest,
    VinOfflineStoreConfig,
    VinOfflineStoreError,
)
from vinlens.store.reader import (
    ChunkStatus,
    StoreGeneration,
    StoreIntegrityProblem,
    VinOfflineStoreReader,
    capture_store_generation,
    open_vin_offline_store,
)
from vinlens.store.sample import VinOfflineSample

__all__ = [
    "BlockKind",
    "BlockMismatchError",
    "ChunkStatus",
    "CorruptChunkError",
    "CorruptRecordError",
    "FieldDrift",
    "FileStat",
    "FsspecStoreAccess",
    "InvalidSampleError",
    "LocalStoreAccess",
    "ManifestError",
    "MissingBlockError",
    "MissingChunksError",
    "MissingShardError",
    "SampleIndexError",
    "SampleIndexRow",
    "SpecialFileError",
    "StoreAccess",
    "StoreAccessError",
    "StoreBlockSpec",
    "StoreComparison",
    "StoreExistsError",
    "StoreGeneration",
    "StoreIntegrityProblem",
    "StoreNotFoundError",
    "StoreReplacedError",
    "StoreShardSpec",
    "StoreVerificationError",
    "UnsupportedFormatError",
    "VinOfflineManifest",
    "VinOfflineSample",
    "VinOfflineStoreConfig",
    "VinOfflineStoreError",
    "VinOfflineStoreReader",
    "VinlensStoreError",
    "capture_store_generation",
    "compare_vin_offline_stores",
    "open_store_access",
    "open_vin_offline_store",
]
