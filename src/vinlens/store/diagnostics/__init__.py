"""Diagnostics for immutable VIN offline stores: store, sample, RRI, geometry, backbone, memory.

The helpers here inspect the v1 storage format (``docs/store-format.md``) directly for
store, sample, RRI, geometry, backbone, memory, batch and raw-dataset coverage
diagnostics. They only ever read: every file access goes through the store reader and its
read-only access layer, and a store replaced before or during a read raises
:class:`VinOfflineStoreReplacedError` instead of returning a mix of two stores.

Sample selection (``max_samples``)
    ``None`` or an integer ``>= 0`` (:func:`check_max_samples`; ``0`` reads no payload
    rows). Rows are chosen deterministically from ``sample_index.jsonl`` alone, spread over splits
    and shards (see :func:`select_vin_offline_sample_indices`): the budget is apportioned
    over splits (sorted by name) and, inside each split, over shards (sorted by id), each
    with at least one row per non-empty group when the budget allows and the rest in
    proportion to group size by the largest-remainder rule (Hamilton apportionment).
    Inside one (split, shard) cell the rows are taken as evenly spaced runs of up to
    :data:`SELECTION_RUN_LENGTH` consecutive cell rows, so a sample touches few zarr
    chunks. ``max_samples=None`` scans every row.

Partials, folds and executors
    Each shard's selected rows are read into small accumulators; their state after one
    shard is the shard's *partial* (picklable, bounded by the histogram and reservoir
    limits, never by the shard's size), and the store's result is the fold of the
    partials in manifest shard order. Every merge is exact and associative (integer
    counts, exact dyadic sums, float16 bit-pattern counts, reservoirs keyed by a hash of
    the value's position), so the record is equal (``==``) whether the partials were
    computed here or on any ``concurrent.futures.Executor``, on one worker or many.

Streaming, chunk-aware reads
    Per shard, per-candidate blocks are read together in windows aligned to their largest
    row chunk (so each chunk is decoded once and RRI, validity, ids, components and poses
    of a row are joined in memory), backbone fields chunk by chunk, and ``vin_points``
    records in contiguous byte runs, all through the reader's windowed read
    (:meth:`~vinlens.store.reader.VinOfflineStoreReader.read_window`), which applies the
    reader's chunk checks and marks rows of missing or refused chunks unreadable.

Conventions
    * Candidate counts and RRI come from ``candidate_valid``: count = valid candidates of
      a row; RRI values = ``rri[valid & isfinite(rri)]``. A store whose capability
      ``scene_labels`` is false reports ``candidate_count``/``rri`` as ``None``
      (unavailable), never as zeros.
    * Candidate poses ``[tx, ty, tz, qw, qx, qy, qz]`` are in the reference-rig frame.
      ``distance_m`` = ``||t||``; ``azimuth_deg`` = ``atan2(ty, tx)`` and
      ``elevation_deg`` = ``atan2(tz, hypot(tx, ty))`` locate the candidate as seen from
      the rig origin; with ``q`` normalised, ``rotation_angle_deg`` = ``2 acos(|qw|)``
      (geodesic angle to the rig orientation, 0..180; ``q`` and ``-q`` agree), and
      ``yaw_deg``/``pitch_deg``/``roll_deg`` are intrinsic Z-Y'-X'' Tait-Bryan angles:
      yaw = ``atan2(2(qw qz + qx qy), 1 - 2(qy^2 + qz^2))``, pitch =
      ``asin(2(qw qy - qz qx))``, roll = ``atan2(2(qw qx + qy qz), 1 - 2(qx^2 + qy^2))``.
      Labelled stores use valid candidates; unlabelled ones every candidate whose pose is
      not all zeros (padding).
    * RRI/component pairs are joined by candidate id (ids >= 0 that occur once in the
      row), admitted where RRI and component are both finite and the candidate valid.
    * Backbone moments: float16 fields are summarised by exact counts of their 65,536 bit
      patterns, so their mean, std, ``abs_mean`` and ``nz_frac`` are exact (rounded once);
      float32/float64 fields get float64 two-pass moments per cache-sized block, and
      blocks merge by Chan et al.'s formula carried out in exact arithmetic. ``nz_frac``
      counts ``|x| > 1e-6`` exactly.
    * Memory per component is the tensor bytes one sample occupies after loading:
      ``vin_points`` (``n x 3`` float32), ``oracle_rri`` (candidate_valid, rri, components,
      ids), ``candidate_poses``, ``backbone`` and ``total``; MiB = 2**20 bytes;
      percentiles use NumPy's default (linear) rule.
    * Non-finite values are integrity problems wherever the spec allows none (everything
      except RRI and RRI components, which are NaN where undefined; infinite RRI is a
      problem too), as are missing chunks and blocks that disagree with the manifest.
      Rows in missing chunks, or in chunks the reader refuses (wrong size, not a regular
      file), are left out of every statistic: fill values are never data.
"""

from __future__ import annotations

from vinlens.store.coverage import (
    VinOfflineCoverageSceneDiagnostic,
    VinOfflineCoverageStats,
    collect_vin_offline_dataset_coverage,
)
from vinlens.store.diagnostics.accumulators import StatsPartial
from vinlens.store.diagnostics.acquire import (
    ShardTask,
    capture_vin_offline_dataset_stats_request,
    collect_vin_offline_dataset_stats,
    dask_executor,
    inspect_vin_offline_dataset_stats,
    inspect_vin_offline_dataset_stats_with_progress,
    run_shard_task,
)
from vinlens.store.diagnostics.correlation import (
    RriPairCorrelation,
    pearson_r,
    rri_component_correlations,
    rri_pair_arrays,
)
from vinlens.store.diagnostics.problems import PROBLEM_SEVERITIES, dashboard_problems, scan_scope
from vinlens.store.diagnostics.records import (
    MAX_HISTOGRAM_VALUES,
    MAX_LISTED_SAMPLE_KEYS,
    MAX_SAMPLE_SUMMARIES,
    POSE_DIAGNOSTICS,
    SELECTION_RUN_LENGTH,
    NumericSummary,
    VinOfflineBackboneDiagnostic,
    VinOfflineBlockDiagnostic,
    VinOfflineDatasetStats,
    VinOfflineDatasetStatsRequest,
    VinOfflineMemoryDiagnostic,
    VinOfflineSampleDiagnostic,
    VinOfflineStoreSelection,
    check_max_samples,
)
from vinlens.store.diagnostics.sampling import apportion, select_vin_offline_sample_indices
from vinlens.store.errors import VinOfflineStoreReplacedError
from vinlens.store.reader import StoreIntegrityProblem

__all__ = [
    "MAX_HISTOGRAM_VALUES",
    "MAX_LISTED_SAMPLE_KEYS",
    "MAX_SAMPLE_SUMMARIES",
    "POSE_DIAGNOSTICS",
    "PROBLEM_SEVERITIES",
    "SELECTION_RUN_LENGTH",
    "NumericSummary",
    "RriPairCorrelation",
    "ShardTask",
    "StatsPartial",
    "StoreIntegrityProblem",
    "VinOfflineBackboneDiagnostic",
    "VinOfflineBlockDiagnostic",
    "VinOfflineCoverageSceneDiagnostic",
    "VinOfflineCoverageStats",
    "VinOfflineDatasetStats",
    "VinOfflineDatasetStatsRequest",
    "VinOfflineMemoryDiagnostic",
    "VinOfflineSampleDiagnostic",
    "VinOfflineStoreReplacedError",
    "VinOfflineStoreSelection",
    "apportion",
    "capture_vin_offline_dataset_stats_request",
    "check_max_samples",
    "collect_vin_offline_dataset_coverage",
    "collect_vin_offline_dataset_stats",
    "dashboard_problems",
    "dask_executor",
    "inspect_vin_offline_dataset_stats",
    "inspect_vin_offline_dataset_stats_with_progress",
    "pearson_r",
    "rri_component_correlations",
    "rri_pair_arrays",
    "run_shard_task",
    "scan_scope",
    "select_vin_offline_sample_indices",
]
