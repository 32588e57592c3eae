"""Diagnostics for immutable VIN offline stores (seed ``data_handling.vin_store.diagnostics``).

The helpers here inspect the v1 storage format (``docs/store-format.md``) directly for
store, sample, RRI, geometry, backbone, memory, batch and raw-dataset coverage
diagnostics. They only ever read: every file access goes through the store reader and its
read-only access layer, and a store replaced before or during a read raises
:class:`VinOfflineStoreReplacedError` instead of returning a mix of two stores.

Sample selection (``max_samples``)
    Rows are chosen deterministically from ``sample_index.jsonl`` alone, spread over splits
    and shards (see :func:`select_vin_offline_sample_indices`): the budget is apportioned
    over splits (sorted by name) and, inside each split, over shards (sorted by id), each
    with at least one row per non-empty group when the budget allows and the rest in
    proportion to group size by the largest-remainder rule (Hamilton apportionment).
    Inside one (split, shard) cell the rows are taken as evenly spaced runs of up to
    :data:`SELECTION_RUN_LENGTH` consecutive cell rows, so a sample touches few zarr
    chunks. ``max_samples=None`` scans every row.

Streaming, chunk-aware reads
    Per shard, per-candidate blocks are read together in windows aligned to their largest
    row chunk (so each chunk is decoded once and RRI, validity, ids, components and poses
    of a row are joined in memory), backbone fields chunk by chunk, and ``vin_points``
    records in contiguous byte runs. Uncompressed chunks (a lone ``bytes`` codec, no
    sharding) are read whole through the access layer and viewed in place; compressed or
    sharded arrays are decoded by zarr through the reader, in windows of about 8 MiB.
    Accumulators have fixed size (summaries, Chan moments, count tables) and every list
    of values is a bounded, deterministic subsample, so payload memory does not grow with
    the store (the parsed sample index, held by the reader, does).

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
    * Backbone moments are float64: values are widened exactly (float16 and float32) in
      cache-sized blocks, each block gets two-pass moments, and blocks merge with Chan et
      al.'s parallel formula. ``nz_frac`` counts ``|x| > 1e-6`` exactly.
    * Memory per component is the tensor bytes one sample occupies after loading:
      ``vin_points`` (``n x 3`` float32), ``oracle_rri`` (candidate_valid, rri, components,
      ids), ``candidate_poses``, ``backbone`` and ``total``; MiB = 2**20 bytes;
      percentiles use NumPy's default (linear) rule.
    * Non-finite values are integrity problems wherever the spec allows none (everything
      except RRI and RRI components, which are NaN where undefined; infinite RRI is a
      problem too), as are missing chunks and blocks that disagree with the manifest.
      Rows in missing chunks are left out of every statistic: fill values are never data.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vinlens.store.coverage import (
    VinOfflineCoverageSceneDiagnostic,
    VinOfflineCoverageStats,
    collect_vin_offline_dataset_coverage,
)
from vinlens.store.format import (
    BACKBONE_PREFIX,
    RRI_COMPONENT_PREFIX,
    BlockKind,
    CorruptChunkError,
    MissingChunksError,
    StoreBlockSpec,
    StoreReplacedError,
    VinOfflineStoreConfig,
    VinOfflineStoreError,
    arrays_dir,
)
from vinlens.store.reader import (
    StoreGeneration,
    StoreIntegrityProblem,
    VinOfflineStoreReader,
    as_store_config,
    capture_store_generation,
)

__all__ = [
    "MAX_HISTOGRAM_VALUES",
    "MAX_LISTED_SAMPLE_KEYS",
    "MAX_SAMPLE_SUMMARIES",
    "POSE_DIAGNOSTICS",
    "SELECTION_RUN_LENGTH",
    "NumericSummary",
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
    "collect_vin_offline_dataset_coverage",
    "collect_vin_offline_dataset_stats",
    "inspect_vin_offline_dataset_stats",
    "inspect_vin_offline_dataset_stats_with_progress",
    "select_vin_offline_sample_indices",
]

#: Most values kept per histogram series; beyond it a uniform deterministic subsample.
MAX_HISTOGRAM_VALUES = 65_536
#: Most per-row summaries in ``sample_summaries`` (the rows a 512-row selection picks).
MAX_SAMPLE_SUMMARIES = 512
#: Most sample keys listed in ``rri_pairing_unavailable_sample_keys``.
MAX_LISTED_SAMPLE_KEYS = 1_000
#: Longest run of consecutive rows the sample selection takes from one (split, shard).
SELECTION_RUN_LENGTH = 16
#: Rows in the batch-shape preview.
BATCH_PREVIEW_SIZE = 4
#: Keys of ``candidate_pose_values`` (see the module docstring for the conventions).
POSE_DIAGNOSTICS = (
    "distance_m",
    "azimuth_deg",
    "elevation_deg",
    "rotation_angle_deg",
    "yaw_deg",
    "pitch_deg",
    "roll_deg",
)
_BATCH_BYTES = 8 << 20
# Elements widened to float64 at a time: two 256 KiB buffers stay in cache.
_MOMENT_BLOCK = 1 << 15
_MIB = float(1 << 20)
_ORACLE_BLOCKS = ("candidate_valid", "rri", "candidate_ids")
_LABEL_BLOCKS = (*_ORACLE_BLOCKS, "candidate_poses")


# --------------------------------------------------------------------------------------
# Records (the seed's classes, fields and defaults; additions at the end, with defaults)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumericSummary:
    """Finite-value summary for one numeric diagnostic series."""

    count: int
    minimum: float | None
    mean: float | None
    maximum: float | None


@dataclass(frozen=True)
class VinOfflineBackboneDiagnostic:
    """Streaming numeric summary for one stored backbone field.

    ``mean``/``std``/``abs_mean``/``nz_frac`` are ``None`` when no finite value was seen.
    """

    field: str
    shape: tuple[int, ...]
    numel: int
    sampled_rows: int
    count: int
    mean: float | None
    std: float | None
    abs_mean: float | None
    nz_frac: float | None


@dataclass(frozen=True)
class VinOfflineBlockDiagnostic:
    """Render-ready manifest summary for one stored offline block."""

    shard_id: str
    name: str
    kind: str
    dtype: str | None
    shape: tuple[int, ...]
    optional: bool
    estimated_bytes: int | None


@dataclass(frozen=True)
class VinOfflineMemoryDiagnostic:
    """Estimated per-sample runtime memory for one offline-store component."""

    component: str
    mean_mib: float
    median_mib: float
    p95_mib: float


@dataclass(frozen=True)
class VinOfflineSampleDiagnostic:
    """Per-row sanity summary for one sampled VIN offline record.

    ``candidate_count`` and ``rri`` are ``None`` when scene supervision is unavailable
    (or the row's label chunks are missing); ``vin_points`` is the row's point count
    (``None`` when its record could not be read).
    """

    sample_index: int
    sample_key: str
    scene_id: str
    snippet_id: str
    split: str
    shard_id: str
    row: int
    candidate_count: int | None
    rri: NumericSummary | None
    vin_points: int | None


@dataclass(frozen=True)
class VinOfflineDatasetStats:
    """Store-level diagnostics for an immutable VIN offline dataset.

    Added after the seed's fields: ``integrity_problems`` (missing chunks, blocks that
    disagree with the manifest, unreadable records, non-finite values where the spec
    allows none, duplicate candidate ids), ``rri_pairing_unavailable_count`` (the full
    count behind the bounded key list), ``max_samples`` (the request's budget) and
    ``generation`` (the store generation the numbers were read from, JSON form).
    """

    store_dir: str
    version: int
    num_samples: int
    sampled_samples: int
    split_counts: dict[str, int]
    num_scenes: int
    num_snippets: int
    materialized_blocks: dict[str, bool]
    candidate_count: NumericSummary | None
    rri: NumericSummary | None
    vin_points: NumericSummary
    numeric_bytes: int
    block_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    block_diagnostics: list[VinOfflineBlockDiagnostic] = field(default_factory=list)
    sample_summaries: list[VinOfflineSampleDiagnostic] = field(default_factory=list)
    candidate_count_values: list[int] = field(default_factory=list)
    rri_values: list[float] = field(default_factory=list)
    vin_point_values: list[int] = field(default_factory=list)
    rri_component_values: dict[str, list[float]] = field(default_factory=dict)
    rri_component_summaries: dict[str, NumericSummary] = field(default_factory=dict)
    candidate_pose_values: dict[str, list[float]] = field(default_factory=dict)
    candidate_pose_summaries: dict[str, NumericSummary] = field(default_factory=dict)
    memory_diagnostics: list[VinOfflineMemoryDiagnostic] = field(default_factory=list)
    backbone_diagnostics: list[VinOfflineBackboneDiagnostic] = field(default_factory=list)
    scene_labels_available: bool = True
    batch_shapes_available: bool = True
    batch_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rri_component_pairs: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    rri_pairing_unavailable_sample_keys: list[str] = field(default_factory=list)
    integrity_problems: list[StoreIntegrityProblem] = field(default_factory=list)
    rri_pairing_unavailable_count: int = 0
    max_samples: int | None = None
    generation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VinOfflineStoreSelection:
    """Canonical root-only store selection: the whole store at one absolute path."""

    store_dir: str
    scope: str = "root"
    # How to reach a URL store; credentials never enter the request's digest.
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def to_json_dict(self) -> dict[str, str]:
        return {"scope": self.scope, "store_dir": self.store_dir}


@dataclass(frozen=True)
class VinOfflineDatasetStatsRequest:
    """Complete generation-bound request for one root diagnostics acquisition."""

    selection: VinOfflineStoreSelection
    generation: StoreGeneration
    max_samples: int | None = 512

    def __post_init__(self) -> None:
        _check_max_samples(self.max_samples)

    def canonical_json(self) -> str:
        """Sorted-key, fixed-separator JSON of (selection, generation, max_samples)."""
        return json.dumps(
            {
                "generation": self.generation.to_json_dict(),
                "max_samples": self.max_samples,
                "selection": self.selection.to_json_dict(),
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )

    def digest(self) -> str:
        """Return the deterministic cache and retained-result identity."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()


class VinOfflineStoreReplacedError(StoreReplacedError):
    """The store at the request's path is not the generation the request captured.

    Raised when the store was replaced (or a top-level file changed) before the read
    started or while it ran; the acquisition returns nothing.
    """


def _check_max_samples(max_samples: int | None) -> None:
    if max_samples is None:
        return
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 0:
        raise ValueError(f"max_samples must be None or an integer >= 0, got {max_samples!r}")


# --------------------------------------------------------------------------------------
# Deterministic sample selection
# --------------------------------------------------------------------------------------


def apportion(sizes: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` over groups of ``sizes``: at least one each, the rest proportionally.

    Returns counts ``c`` with ``sum(c) == min(budget, sum(sizes))`` and ``c[i] <= sizes[i]``.
    When ``budget`` covers one row per non-empty group, every non-empty group gets one and
    the remainder ``r`` is shared in proportion to ``sizes[i] - 1`` by largest remainders
    (ties to the earlier group), so ``c[i] - 1`` is ``floor`` or ``ceil`` of its exact
    quota. A smaller budget gives one row to each of the largest groups (ties: earlier).
    """
    if budget < 0 or any(s < 0 for s in sizes):
        raise ValueError("sizes and budget must be non-negative")
    total = sum(sizes)
    if budget >= total:
        return list(sizes)
    nonempty = [i for i, s in enumerate(sizes) if s > 0]
    counts = [0] * len(sizes)
    if budget < len(nonempty):
        for i in sorted(nonempty, key=lambda i: (-sizes[i], i))[:budget]:
            counts[i] = 1
        return counts
    for i in nonempty:
        counts[i] = 1
    remainder = budget - len(nonempty)
    weight = total - len(nonempty)
    if remainder == 0 or weight == 0:
        return counts
    fractions = []
    handed = 0
    for i in nonempty:
        share, rest = divmod(remainder * (sizes[i] - 1), weight)
        counts[i] += share
        handed += share
        fractions.append((-rest, i))
    for _, i in sorted(fractions)[: remainder - handed]:
        counts[i] += 1
    return counts


def _runs(cell: Sequence[int], count: int) -> list[int]:
    """``count`` members of ``cell`` as evenly spaced runs of consecutive members."""
    size = len(cell)
    if count >= size:
        return list(cell)
    if count == 0:
        return []
    groups = math.ceil(count / SELECTION_RUN_LENGTH)
    chosen: list[int] = []
    done = 0
    for g in range(groups):
        take = count // groups + (1 if g < count % groups else 0)
        # Windows proportional to the run sizes always have room for their run.
        lo = (size * done) // count
        hi = (size * (done + take)) // count
        start = lo + (hi - lo - take) // 2
        chosen.extend(cell[start : start + take])
        done += take
    return chosen


def select_vin_offline_sample_indices(
    groups: Sequence[tuple[str, str]], max_samples: int | None
) -> list[int]:
    """Sample indices to scan, sorted: ``groups[i]`` is ``(split, shard_id)`` of sample ``i``.

    Deterministic in its inputs; see the module docstring for the rules.
    """
    _check_max_samples(max_samples)
    if max_samples is None or max_samples >= len(groups):
        return list(range(len(groups)))
    cells: dict[str, dict[str, list[int]]] = {}
    for index, (split, shard_id) in enumerate(groups):
        cells.setdefault(split, {}).setdefault(shard_id, []).append(index)
    splits = sorted(cells)
    split_quota = apportion([sum(len(c) for c in cells[s].values()) for s in splits], max_samples)
    chosen: list[int] = []
    for split, quota in zip(splits, split_quota, strict=True):
        shard_ids = sorted(cells[split])
        shard_quota = apportion([len(cells[split][k]) for k in shard_ids], quota)
        for shard_id, count in zip(shard_ids, shard_quota, strict=True):
            chosen.extend(_runs(cells[split][shard_id], count))
    chosen.sort()
    return chosen


# --------------------------------------------------------------------------------------
# Accumulators
# --------------------------------------------------------------------------------------


class _Summary:
    """Streaming finite-value count/min/mean/max (float64 sum)."""

    __slots__ = ("count", "maximum", "minimum", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.count += int(values.size)
        self.total += float(np.add.reduce(values, dtype=np.float64, axis=None))
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))

    def record(self) -> NumericSummary:
        if self.count == 0:
            return NumericSummary(0, None, None, None)
        return NumericSummary(self.count, self.minimum, self.total / self.count, self.maximum)


def _priorities(positions: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of positions: a fixed pseudo-random priority per observed value."""
    z = positions.astype(np.uint64) + np.uint64((salt * 0x9E3779B97F4A7C15) & (2**64 - 1))
    # In place, one scratch array: this runs for every value of every histogram series.
    shifted = np.right_shift(z, np.uint64(30))
    np.bitwise_xor(z, shifted, out=z)
    np.multiply(z, np.uint64(0xBF58476D1CE4E5B9), out=z)
    np.right_shift(z, np.uint64(27), out=shifted)
    np.bitwise_xor(z, shifted, out=z)
    np.multiply(z, np.uint64(0x94D049BB133111EB), out=z)
    np.right_shift(z, np.uint64(31), out=shifted)
    np.bitwise_xor(z, shifted, out=z)
    return z


class _Reservoir:
    """At most ``limit`` rows of values: the ones whose position hashes lowest.

    A uniform sample without replacement that depends only on which positions were seen,
    not on reading order; kept rows are returned in position order. Priorities are
    distinct (splitmix64 is a bijection), so once ``limit`` rows are kept, a new row whose
    priority is not below the largest kept one can never be kept and is dropped at once.
    """

    def __init__(self, columns: int, salt: int, limit: int = MAX_HISTOGRAM_VALUES) -> None:
        self.limit = limit
        self.salt = salt
        self.columns = columns
        self.priority = np.zeros(0, dtype=np.uint64)
        self.position = np.zeros(0, dtype=np.int64)
        self.values = np.zeros((0, columns), dtype=np.float64)
        self._threshold: np.uint64 | None = None  # largest kept priority once full
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0

    def add(self, positions: np.ndarray, values: np.ndarray) -> None:
        if positions.size == 0:
            return
        positions = positions.astype(np.int64, copy=False)
        values = values.reshape(positions.size, -1)
        priority = _priorities(positions, self.salt)
        if self._threshold is not None:
            keep = priority < self._threshold
            if not keep.any():
                return
            if not keep.all():
                positions, values, priority = positions[keep], values[keep], priority[keep]
        self._pending.append((positions, values, priority))
        self._pending_rows += positions.size
        if self._pending_rows >= self.limit:
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        positions = np.concatenate([self.position, *(p for p, _, _ in self._pending)])
        values = np.concatenate(
            [self.values, *(v.astype(np.float64, copy=False) for _, v, _ in self._pending)]
        )
        priority = np.concatenate([self.priority, *(q for _, _, q in self._pending)])
        self._pending = []
        self._pending_rows = 0
        if positions.size > self.limit:
            keep = np.argpartition(priority, self.limit - 1)[: self.limit]
            positions, values, priority = positions[keep], values[keep], priority[keep]
        if positions.size >= self.limit:
            self._threshold = priority.max()
        self.position, self.values, self.priority = positions, values, priority

    def rows(self) -> np.ndarray:
        self._compact()
        # Positions are distinct, so the (faster) default sort gives the stable order.
        return self.values[np.argsort(self.position)]


def _weighted_percentile(counts: Mapping[int, int], q: float) -> float:
    """``np.percentile`` (linear rule) of the multiset ``{value: count}``."""
    items = sorted((v, c) for v, c in counts.items() if c > 0)
    n = sum(c for _, c in items)
    if n == 0:
        return 0.0
    position = q / 100.0 * (n - 1)
    lo_index = math.floor(position)
    frac = position - lo_index

    def at(index: int) -> int:
        seen = 0
        for value, count in items:
            seen += count
            if index < seen:
                return value
        return items[-1][0]

    lo = at(lo_index)
    hi = at(min(lo_index + 1, n - 1))
    return lo + (hi - lo) * frac


def _memory_record(component: str, counts: Counter[int]) -> VinOfflineMemoryDiagnostic:
    n = sum(counts.values())
    mean = sum(v * c for v, c in counts.items()) / n if n else 0.0
    return VinOfflineMemoryDiagnostic(
        component=component,
        mean_mib=mean / _MIB,
        median_mib=_weighted_percentile(counts, 50.0) / _MIB,
        p95_mib=_weighted_percentile(counts, 95.0) / _MIB,
    )


def _torch_float16_view(values: np.ndarray) -> Any:
    """A torch float16 tensor over ``values`` (no copy) for torch's vectorised (F16C) casts."""
    import torch

    source = np.ascontiguousarray(values).view(np.int16)
    with warnings.catch_warnings():
        # Chunk views are read-only; torch warns about that, but only reads here.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(source).view(torch.float16)


class _Moments:
    """float64 moments of one backbone field, merged block by block (Chan et al.).

    Values are widened to float64 in cache-sized blocks (exact for float16 and float32);
    each block gets a two-pass mean and ``M2`` (sum of squares of the centred block), and
    blocks merge with Chan et al.'s parallel update ``M2 = M2a + M2b + d^2 na nb / n``, so
    neither a large mean nor a long stream costs precision. ``|x| > 1e-6`` is counted in
    float64. float16 is widened through torch's vectorised (F16C) conversion, which is
    tens of times faster than NumPy's scalar float16 loop; only BLAS-free NumPy reductions
    follow (a threaded BLAS ``dot`` on small blocks stalls on a busy machine).
    """

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.abs_total = 0.0
        self.nonzero = 0
        self.nonfinite = 0
        self._wide = np.empty(_MOMENT_BLOCK, dtype=np.float64)
        self._scratch = np.empty(_MOMENT_BLOCK, dtype=np.float64)
        self._single: Any = None  # torch float32 buffer for float16 input, made on first use

    def add(self, batch: np.ndarray) -> None:
        flat = batch.reshape(-1)
        if flat.dtype != np.float16:
            for start in range(0, flat.size, _MOMENT_BLOCK):
                self._add_block(flat[start : start + _MOMENT_BLOCK])
            return
        # float16: NumPy's cast loop is ~13-22x slower than torch's F16C one (1 Mi values to
        # float64/float32 vs Tensor.copy_ on one thread; numpy 2.4, torch 2.13). Blocks are
        # cast one at a time into a reused buffer: small enough for torch to stay on one
        # thread (its thread pool stalls on a busy machine), large enough to amortise calls.
        half = _torch_float16_view(flat)
        if self._single is None:
            import torch

            self._single = torch.empty(_MOMENT_BLOCK, dtype=torch.float32)
        for start in range(0, flat.size, _MOMENT_BLOCK):
            part = half[start : start + _MOMENT_BLOCK]
            single = self._single[: part.numel()]
            single.copy_(part)
            self._add_block(single.numpy())

    def _add_block(self, block: np.ndarray) -> None:
        wide = self._wide[: block.size]
        np.copyto(wide, block, casting="unsafe")
        total = float(np.add.reduce(wide))
        if not math.isfinite(total):
            finite = np.isfinite(wide)
            self.nonfinite += int(wide.size - np.count_nonzero(finite))
            wide = wide[finite]
            total = float(np.add.reduce(wide))
        n_b = int(wide.size)
        if n_b == 0:
            return
        scratch = self._scratch[:n_b]
        np.abs(wide, out=scratch)
        self.abs_total += float(np.add.reduce(scratch))
        self.nonzero += int(np.count_nonzero(scratch > 1e-6))
        mean_b = total / n_b
        np.subtract(wide, mean_b, out=wide)
        np.square(wide, out=scratch)
        m2_b = float(np.add.reduce(scratch))
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * n_a * n_b / n
        self.count = n

    def finish(self) -> tuple[int, float | None, float | None, float | None, float | None]:
        """``(count, mean, std, abs_mean, nz_frac)`` over the finite values."""
        if self.count == 0:
            return 0, None, None, None, None
        return (
            self.count,
            self.mean,
            math.sqrt(max(self.m2, 0.0) / self.count),
            self.abs_total / self.count,
            self.nonzero / self.count,
        )


# --------------------------------------------------------------------------------------
# Reading helpers
# --------------------------------------------------------------------------------------


def _row_chunk(reader: VinOfflineStoreReader, shard_id: str, name: str) -> int:
    # The reader's checked block layout (zarr.json parsed through the access layer): the
    # row extent of one storage key, the shard shape under sharding. No zarr.Array opened.
    return max(1, reader._open_zarr(shard_id, name).row_chunk)


@dataclass(frozen=True)
class _PlainLayout:
    """A zarr array whose chunks are raw bytes (one ``bytes`` codec, no sharding)."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    encode_key: Callable[[tuple[int, ...]], str]
    rel: str
    chunk_shape: tuple[int, ...]
    stored: np.dtype[Any]
    chunk_bytes: int


def _plain_layout(reader: VinOfflineStoreReader, shard_id: str, name: str) -> _PlainLayout | None:
    """The layout for direct chunk reads, or ``None`` when zarr must decode (codecs, shards).

    Uncompressed chunks are read whole through the access layer and viewed with
    ``numpy.frombuffer``: no per-call event-loop round trip and no copy, which is most of
    zarr's cost on a full scan. Anything else goes through the reader. The layout comes
    from the reader's own parse of ``zarr.json`` (its plain-layout rules: regular grid,
    default ``/`` keys, one ``bytes`` codec), so no ``zarr.Array`` is opened.
    """
    meta = reader._open_zarr(shard_id, name).meta
    if meta.metadata is not None or meta.stored_dtype is None:
        return None
    chunk_shape = tuple(int(n) for n in meta.chunk_shape)
    return _PlainLayout(
        shape=tuple(int(n) for n in meta.shape),
        dtype=meta.dtype,
        encode_key=meta.encode_key,
        rel=f"{arrays_dir(shard_id)}/{name}",
        chunk_shape=chunk_shape,
        stored=meta.stored_dtype,
        chunk_bytes=math.prod(chunk_shape) * meta.stored_dtype.itemsize,
    )


def _read_plain(
    reader: VinOfflineStoreReader,
    shard_id: str,
    name: str,
    layout: _PlainLayout,
    start: int,
    stop: int,
    corrupt: dict[tuple[str, str], VinOfflineStoreError],
) -> tuple[np.ndarray | None, np.ndarray]:
    shape = layout.shape
    rc = layout.chunk_shape[0]
    inner_counts = [
        math.ceil(n / c) if c else 0 for n, c in zip(shape[1:], layout.chunk_shape[1:], strict=True)
    ]
    single = (start // rc == (stop - 1) // rc) and all(n == 1 for n in inner_counts)
    readable = np.ones(stop - start, dtype=bool)
    out: np.ndarray | None = None
    for r in range(start // rc, (stop - 1) // rc + 1):
        r0 = r * rc
        a, b = max(start, r0), min(stop, r0 + rc)
        for inner in itertools.product(*(range(n) for n in inner_counts)):
            key = layout.encode_key((r, *inner))
            try:
                data = reader.access.read_range(f"{layout.rel}/{key}", 0, layout.chunk_bytes)
            except FileNotFoundError:
                readable[a - start : b - start] = False  # listed by the integrity check
                continue
            if len(data) != layout.chunk_bytes:
                corrupt.setdefault(
                    (shard_id, name),
                    CorruptChunkError(
                        f"chunk {key} has {len(data)} bytes",
                        path=reader.access.describe(layout.rel),
                        expected=f"{layout.chunk_bytes} bytes of raw {layout.stored.name}",
                    ),
                )
                readable[a - start : b - start] = False
                continue
            chunk = np.frombuffer(data, dtype=layout.stored).reshape(layout.chunk_shape)
            if single:
                return chunk[a - r0 : b - r0], readable
            if out is None:
                out = np.zeros((stop - start, *shape[1:]), dtype=layout.dtype)
            spans = [
                (i * c, min((i + 1) * c, n))
                for i, c, n in zip(inner, layout.chunk_shape[1:], shape[1:], strict=True)
            ]
            target = (slice(a - start, b - start), *(slice(lo, hi) for lo, hi in spans))
            source = (slice(a - r0, b - r0), *(slice(0, hi - lo) for lo, hi in spans))
            out[target] = chunk[source]
    if out is None and not readable.any():
        return None, readable
    return out, readable


def _read_window(
    reader: VinOfflineStoreReader,
    shard_id: str,
    name: str,
    start: int,
    stop: int,
    row_chunk: int,
    corrupt: dict[tuple[str, str], VinOfflineStoreError],
    layout: _PlainLayout | None = None,
) -> tuple[np.ndarray | None, np.ndarray]:
    """Rows ``start:stop`` (possibly a read-only view) and a per-row readable mask.

    Rows in missing chunks (already listed by the reader's integrity check) or in chunks
    that do not decode (collected in ``corrupt``) are unreadable, never fill values.
    """
    if layout is not None:
        return _read_plain(reader, shard_id, name, layout, start, stop, corrupt)
    try:
        return reader.read_rows(shard_id, name, start, stop), np.ones(stop - start, dtype=bool)
    except (MissingChunksError, CorruptChunkError):
        pass
    readable = np.zeros(stop - start, dtype=bool)
    out: np.ndarray | None = None
    first = (start // row_chunk) * row_chunk
    for lo in range(first, stop, row_chunk):
        a, b = max(lo, start), min(lo + row_chunk, stop)
        try:
            part = reader.read_rows(shard_id, name, a, b)
        except MissingChunksError:
            continue
        except CorruptChunkError as exc:
            corrupt.setdefault((shard_id, name), exc)
            continue
        if out is None:
            out = np.zeros((stop - start, *part.shape[1:]), dtype=part.dtype)
        out[a - start : b - start] = part
        readable[a - start : b - start] = True
    return out, readable


def _windows(
    rows: Sequence[int], row_chunk: int, row_bytes: int, max_bytes: int = _BATCH_BYTES
) -> Iterator[tuple[int, int, int, int]]:
    """``(start, stop, i, j)``: windows of whole row chunks (~``max_bytes``) over sorted ``rows``.

    ``rows[i:j]`` are the rows inside ``start:stop``.
    """
    per_window = max(1, max_bytes // max(1, row_bytes * row_chunk)) * row_chunk
    i = 0
    while i < len(rows):
        window = rows[i] // per_window
        j = i
        while j < len(rows) and rows[j] // per_window == window:
            j += 1
        yield rows[i], rows[j - 1] + 1, i, j
        i = j


def _contiguous_runs(rows: Sequence[int]) -> Iterator[tuple[int, int]]:
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and rows[j] == rows[j - 1] + 1:
            j += 1
        yield rows[i], rows[j - 1] + 1
        i = j


def _row_bytes(spec: StoreBlockSpec) -> int:
    if spec.dtype is None:
        return 0
    return math.prod(spec.row_shape) * np.dtype(spec.dtype).itemsize


# --------------------------------------------------------------------------------------
# The scan
# --------------------------------------------------------------------------------------


@dataclass
class _RowInfo:
    candidate_count: int | None = None
    rri: NumericSummary | None = None
    vin_points: int | None = None


class _StatsScan:
    """One pass over the selected rows of an open reader; :meth:`record` builds the result."""

    def __init__(self, reader: VinOfflineStoreReader, max_samples: int | None) -> None:
        self.reader = reader
        self.max_samples = max_samples
        self.manifest = reader.manifest
        self.labels = self.manifest.capabilities.scene_labels
        self.num_candidates = self.manifest.num_candidates
        samples = reader.samples
        groups = [(row.split, row.shard_id) for row in samples]
        self.selected = select_vin_offline_sample_indices(groups, max_samples)
        summary_budget = MAX_SAMPLE_SUMMARIES
        if max_samples is not None:
            summary_budget = min(max_samples, MAX_SAMPLE_SUMMARIES)
        self.summary_rows = set(select_vin_offline_sample_indices(groups, summary_budget))
        self.row_info: dict[int, _RowInfo] = {i: _RowInfo() for i in self.summary_rows}

        self.problems: list[StoreIntegrityProblem] = list(reader.integrity_problems())
        self.broken: set[tuple[str | None, str | None]] = {
            (p.shard_id, p.block) for p in self.problems if p.kind != "MissingChunksError"
        }
        self.nonfinite: Counter[tuple[str, str]] = Counter()
        self.duplicate_ids: Counter[str] = Counter()
        self.corrupt_chunks: dict[tuple[str, str], VinOfflineStoreError] = {}
        self.unreadable_records: dict[str, tuple[int, VinOfflineStoreError]] = {}
        self._vin_bytes: list[int] = []

        self.candidate_count = _Summary()
        self.rri = _Summary()
        self.vin_points = _Summary()
        self.candidate_count_values = _Reservoir(1, salt=1)
        self.rri_values = _Reservoir(1, salt=2)
        self.vin_point_values = _Reservoir(1, salt=3)
        self.component_summaries: dict[str, _Summary] = {}
        self.component_values: dict[str, _Reservoir] = {}
        self.component_pairs: dict[str, _Reservoir] = {}
        self.pose_summaries = {name: _Summary() for name in POSE_DIAGNOSTICS}
        self.pose_values = {
            name: _Reservoir(1, salt=100 + i) for i, name in enumerate(POSE_DIAGNOSTICS)
        }
        self.backbone: dict[str, _Moments] = {}
        self.backbone_rows: Counter[str] = Counter()
        self.backbone_shape: dict[str, tuple[int, ...]] = {}
        self.memory: dict[str, Counter[int]] = {
            name: Counter()
            for name in ("vin_points", "oracle_rri", "candidate_poses", "backbone", "total")
        }
        self.unpaired_keys: list[str] = []
        self.unpaired_count = 0

    # ---- per shard ------------------------------------------------------------------

    def run(self, progress_cb: Callable[[int, int], None] | None = None) -> None:
        by_shard: dict[str, list[int]] = {}
        samples = self.reader.samples
        for index in self.selected:
            by_shard.setdefault(samples[index].shard_id, []).append(index)
        total = len(self.selected)
        done = 0
        if progress_cb is not None:
            progress_cb(0, total)
        for shard in self.manifest.shards:
            indices = by_shard.get(shard.shard_id)
            if not indices:
                continue
            done += len(indices)
            if (shard.shard_id, None) in self.broken:
                if progress_cb is not None:
                    progress_cb(done, total)
                continue  # shard directory missing: already an integrity problem
            indices.sort(key=lambda i: samples[i].row)
            rows = [samples[i].row for i in indices]
            sample_of_row = np.zeros(shard.num_rows, dtype=np.int64)
            sample_of_row[rows] = indices
            self._labels(shard.shard_id, rows, sample_of_row)
            self._backbone(shard.shard_id, rows)
            self._vin_points(shard.shard_id, rows, sample_of_row)
            self._memory(shard.shard_id, rows)
            if progress_cb is not None:
                progress_cb(done, total)

    def _usable(self, shard_id: str, name: str) -> bool:
        spec = self.reader.block_spec(shard_id, name)
        return (
            spec is not None
            and spec.kind is BlockKind.ZARR_ARRAY
            and (shard_id, name) not in self.broken
        )

    def _labels(self, shard_id: str, rows: list[int], sample_of_row: np.ndarray) -> None:
        shard = self.reader.shard(shard_id)
        components = [
            n[len(RRI_COMPONENT_PREFIX) :]
            for n in shard.block_names
            if n.startswith(RRI_COMPONENT_PREFIX)
        ]
        names = [n for n in _LABEL_BLOCKS if self._usable(shard_id, n)]
        names += [
            f"{RRI_COMPONENT_PREFIX}{c}"
            for c in components
            if self._usable(shard_id, f"{RRI_COMPONENT_PREFIX}{c}")
        ]
        samples = self.reader.samples
        if self.labels and shard.block("candidate_ids") is None:
            for row in rows:
                self.unpaired_count += 1
                if len(self.unpaired_keys) < MAX_LISTED_SAMPLE_KEYS:
                    self.unpaired_keys.append(samples[int(sample_of_row[row])].sample_key)
        if not names:
            return
        chunks = {n: _row_chunk(self.reader, shard_id, n) for n in names}
        layouts = {n: _plain_layout(self.reader, shard_id, n) for n in names}
        window_chunk = max(chunks.values())
        row_bytes = sum(_row_bytes(spec) for n in names if (spec := shard.block(n)) is not None)
        rows_array = np.asarray(rows, dtype=np.int64)
        for start, stop, i, j in _windows(rows, window_chunk, row_bytes):
            sel = rows_array[i:j]
            local = sel - start
            data: dict[str, np.ndarray] = {}
            readable: dict[str, np.ndarray] = {}
            for name in names:
                values, ok = _read_window(
                    self.reader,
                    shard_id,
                    name,
                    start,
                    stop,
                    chunks[name],
                    self.corrupt_chunks,
                    layouts[name],
                )
                if values is not None:
                    data[name] = values[local]
                    readable[name] = ok[local]
            self._label_rows(shard_id, sample_of_row[sel], data, readable, components)

    def _label_rows(
        self,
        shard_id: str,
        sample_index: np.ndarray,
        data: dict[str, np.ndarray],
        readable: dict[str, np.ndarray],
        components: list[str],
    ) -> None:
        """Statistics of one window's selected rows; each uses rows whose blocks it needs read."""
        c = self.num_candidates
        positions = sample_index[:, None] * max(c, 1) + np.arange(c)[None, :]

        def rows_with(*names: str) -> np.ndarray | None:
            if any(name not in data for name in names):
                return None
            mask = np.ones(sample_index.size, dtype=bool)
            for name in names:
                mask &= readable[name]
            return mask

        valid_rows = rows_with("candidate_valid")
        if self.labels and valid_rows is not None:
            valid = data["candidate_valid"]
            counts = valid[valid_rows].sum(axis=1)
            self.candidate_count.add(counts)
            self.candidate_count_values.add(sample_index[valid_rows], counts)
            for si, count in zip(sample_index[valid_rows].tolist(), counts.tolist(), strict=True):
                info = self.row_info.get(si)
                if info is not None:
                    info.candidate_count = int(count)
            rri_rows = rows_with("candidate_valid", "rri")
            if rri_rows is not None:
                rri = data["rri"]
                infinite = int(np.count_nonzero(np.isinf(rri[readable["rri"]])))
                if infinite:
                    self.nonfinite[(shard_id, "rri")] += infinite
                mask = valid & np.isfinite(rri) & rri_rows[:, None]
                self.rri.add(rri[mask])
                self.rri_values.add(positions[mask], rri[mask])
                for i in np.flatnonzero(rri_rows).tolist():
                    info = self.row_info.get(int(sample_index[i]))
                    if info is not None:
                        row_summary = _Summary()
                        row_summary.add(rri[i][mask[i]])
                        info.rri = row_summary.record()
            unique = None
            if "candidate_ids" in data:
                unique = self._unique_ids(shard_id, data["candidate_ids"])
            for name in components:
                block = f"{RRI_COMPONENT_PREFIX}{name}"
                comp_rows = rows_with("candidate_valid", block)
                if comp_rows is None:
                    continue
                comp = data[block]
                infinite = int(np.count_nonzero(np.isinf(comp[readable[block]])))
                if infinite:
                    self.nonfinite[(shard_id, block)] += infinite
                cmask = valid & np.isfinite(comp) & comp_rows[:, None]
                self.component_summaries.setdefault(name, _Summary()).add(comp[cmask])
                self.component_values.setdefault(
                    name, _Reservoir(1, salt=10 + len(self.component_values))
                ).add(positions[cmask], comp[cmask])
                pair_rows = rows_with("candidate_valid", block, "rri", "candidate_ids")
                if pair_rows is not None and unique is not None:
                    rri = data["rri"]
                    pmask = cmask & np.isfinite(rri) & unique & pair_rows[:, None]
                    self.component_pairs.setdefault(
                        name, _Reservoir(2, salt=50 + len(self.component_pairs))
                    ).add(positions[pmask], np.stack([rri[pmask], comp[pmask]], axis=1))
        if self.labels:
            pose_rows = rows_with("candidate_poses", "candidate_valid")
            if pose_rows is not None:
                mask = data["candidate_valid"] & pose_rows[:, None]
                self._poses(shard_id, data["candidate_poses"], mask, positions)
        else:
            pose_rows = rows_with("candidate_poses")
            if pose_rows is not None:
                poses = data["candidate_poses"]
                mask = (poses != 0).any(axis=2) & pose_rows[:, None]
                self._poses(shard_id, poses, mask, positions)

    def _unique_ids(self, shard_id: str, ids: np.ndarray) -> np.ndarray:
        """Mask of candidates whose id is >= 0 and occurs once in its row."""
        order = np.sort(ids, axis=1)
        dup_sorted = np.zeros_like(order, dtype=bool)
        same = order[:, 1:] == order[:, :-1]
        dup_sorted[:, 1:] |= same
        dup_sorted[:, :-1] |= same
        unique = ids >= 0
        rows_with_dups = np.flatnonzero((dup_sorted & (order >= 0)).any(axis=1))
        for r in rows_with_dups.tolist():
            values, counts = np.unique(ids[r], return_counts=True)
            repeated = values[(counts > 1) & (values >= 0)]
            unique[r] &= ~np.isin(ids[r], repeated)
            self.duplicate_ids[shard_id] += 1
        return unique

    def _poses(
        self, shard_id: str, poses: np.ndarray, mask: np.ndarray, positions: np.ndarray
    ) -> None:
        chosen = poses[mask].astype(np.float64)
        where = positions[mask]
        finite = np.isfinite(chosen).all(axis=1)
        q = chosen[:, 3:7]
        norm = np.linalg.norm(q, axis=1)
        good = finite & (norm > 0)
        bad = int(chosen.shape[0] - np.count_nonzero(good))
        if bad:
            self.nonfinite[(shard_id, "candidate_poses")] += bad
        if bad:
            chosen, where, q, norm = chosen[good], where[good], q[good], norm[good]
        if chosen.shape[0] == 0:
            return
        # Contiguous columns: the element-wise math below runs on unit-stride arrays.
        t = np.ascontiguousarray(chosen[:, :3].T).T
        qw, qx, qy, qz = (q / norm[:, None]).T.copy()
        deg = 180.0 / math.pi
        values = {
            "distance_m": np.linalg.norm(t, axis=1),
            "azimuth_deg": np.arctan2(t[:, 1], t[:, 0]) * deg,
            "elevation_deg": np.arctan2(t[:, 2], np.hypot(t[:, 0], t[:, 1])) * deg,
            "rotation_angle_deg": 2.0 * np.arccos(np.clip(np.abs(qw), 0.0, 1.0)) * deg,
            "yaw_deg": np.arctan2(2 * (qw * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz)) * deg,
            "pitch_deg": np.arcsin(np.clip(2 * (qw * qy - qz * qx), -1.0, 1.0)) * deg,
            "roll_deg": np.arctan2(2 * (qw * qx + qy * qz), 1 - 2 * (qx * qx + qy * qy)) * deg,
        }
        for name, series in values.items():
            self.pose_summaries[name].add(series)
            self.pose_values[name].add(where, series)

    def _backbone(self, shard_id: str, rows: list[int]) -> None:
        shard = self.reader.shard(shard_id)
        rows_array = np.asarray(rows, dtype=np.int64)
        for spec in shard.blocks:
            if not spec.name.startswith(BACKBONE_PREFIX) or not self._usable(shard_id, spec.name):
                continue
            name = spec.name[len(BACKBONE_PREFIX) :]
            assert spec.dtype is not None
            moments = self.backbone.setdefault(name, _Moments())
            self.backbone_shape.setdefault(name, spec.row_shape)
            chunk = _row_chunk(self.reader, shard_id, spec.name)
            layout = _plain_layout(self.reader, shard_id, spec.name)
            # Raw chunks are consumed one by one as zero-copy views; zarr-decoded ones in
            # ~8 MiB windows to amortise its per-call cost.
            max_bytes = 0 if layout is not None else _BATCH_BYTES
            for start, stop, i, j in _windows(rows, chunk, _row_bytes(spec), max_bytes):
                values, readable = _read_window(
                    self.reader,
                    shard_id,
                    spec.name,
                    start,
                    stop,
                    chunk,
                    self.corrupt_chunks,
                    layout,
                )
                if values is None:
                    continue
                local = rows_array[i:j] - start
                take = local[readable[local]]
                # Every row of the window selected (full scans): no gather copy.
                batch = values if take.size == stop - start else values[take]
                before = moments.nonfinite
                moments.add(batch)
                bad = moments.nonfinite - before
                if bad:
                    self.nonfinite[(shard_id, spec.name)] += bad
                self.backbone_rows[name] += int(take.size)

    def _vin_points(self, shard_id: str, rows: list[int], sample_of_row: np.ndarray) -> None:
        if (shard_id, "vin_points") in self.broken:
            return
        lengths: list[int] = []
        indices: list[int] = []
        nonfinite = 0

        def take(row: int, points: np.ndarray) -> None:
            nonlocal nonfinite
            n = int(points.shape[0])
            si = int(sample_of_row[row])
            lengths.append(n)
            indices.append(si)
            nonfinite += int(points.size - np.count_nonzero(np.isfinite(points)))
            info = self.row_info.get(si)
            if info is not None:
                info.vin_points = n

        for start, stop in _contiguous_runs(rows):
            row = start
            while row < stop:
                try:
                    # Streams the run in bounded byte batches.
                    for r, points in self.reader.iter_vin_points(shard_id, row, stop):
                        take(r, points)
                        row = r + 1
                except VinOfflineStoreError:
                    # Isolate the bad record, keep every readable one.
                    try:
                        take(row, self.reader.read_vin_points(shard_id, row))
                    except VinOfflineStoreError as exc:
                        count, first = self.unreadable_records.get(shard_id, (0, exc))
                        self.unreadable_records[shard_id] = (count + 1, first)
                    row += 1
        if nonfinite:
            self.nonfinite[(shard_id, "vin_points")] += nonfinite
        if lengths:
            array = np.asarray(lengths, dtype=np.int64)
            self.vin_points.add(array)
            self.vin_point_values.add(np.asarray(indices, dtype=np.int64), array)
            self.memory["vin_points"].update(n * 12 for n in lengths)
            self._vin_bytes.extend(n * 12 for n in lengths)

    def _memory(self, shard_id: str, rows: list[int]) -> None:
        shard = self.reader.shard(shard_id)
        oracle = sum(
            _row_bytes(spec)
            for spec in shard.blocks
            if spec.name in _ORACLE_BLOCKS or spec.name.startswith(RRI_COMPONENT_PREFIX)
        )
        poses_spec = shard.block("candidate_poses")
        poses = _row_bytes(poses_spec) if poses_spec is not None else 0
        backbone = sum(
            _row_bytes(spec) for spec in shard.blocks if spec.name.startswith(BACKBONE_PREFIX)
        )
        fixed = oracle + poses + backbone
        k = len(rows)
        self.memory["oracle_rri"][oracle] += k
        self.memory["candidate_poses"][poses] += k
        self.memory["backbone"][backbone] += k
        self.memory["total"].update(fixed + vin_bytes for vin_bytes in self._vin_bytes)
        self._vin_bytes.clear()

    # ---- result ---------------------------------------------------------------------

    def record(
        self, batch_shapes: dict[str, tuple[int, ...]], batch_ok: bool, generation: StoreGeneration
    ) -> VinOfflineDatasetStats:
        manifest = self.manifest
        samples = self.reader.samples
        split_counts = dict(sorted(Counter(row.split for row in samples).items()))
        block_diagnostics: list[VinOfflineBlockDiagnostic] = []
        block_shapes: dict[str, tuple[int, ...]] = {}
        numeric_bytes = 0
        for shard in manifest.shards:
            for spec in shard.blocks:
                estimated = spec.estimated_bytes
                block_diagnostics.append(
                    VinOfflineBlockDiagnostic(
                        shard_id=shard.shard_id,
                        name=spec.name,
                        kind=spec.kind.value,
                        dtype=spec.dtype,
                        shape=tuple(spec.shape),
                        optional=spec.optional,
                        estimated_bytes=estimated,
                    )
                )
                if spec.kind is BlockKind.ZARR_ARRAY:
                    numeric_bytes += estimated or 0
                    previous = block_shapes.get(spec.name)
                    if previous is None:
                        block_shapes[spec.name] = tuple(spec.shape)
                    elif previous[1:] == spec.row_shape:
                        block_shapes[spec.name] = (previous[0] + spec.num_rows, *spec.row_shape)
                    else:
                        self.problems.append(
                            StoreIntegrityProblem(
                                "BlockMismatchError",
                                shard.shard_id,
                                spec.name,
                                self.reader.access.describe("manifest.json"),
                                f"block {spec.name!r} of shard {shard.shard_id!r} has row shape "
                                f"{list(spec.row_shape)} but earlier shards store "
                                f"{list(previous[1:])}",
                            )
                        )

        problems = list(self.problems)
        for (shard_id, block), exc in sorted(self.corrupt_chunks.items()):
            problems.append(
                StoreIntegrityProblem(type(exc).__name__, shard_id, block, exc.path, str(exc))
            )
        for shard_id, (count, exc) in sorted(self.unreadable_records.items()):
            problems.append(
                StoreIntegrityProblem(
                    type(exc).__name__,
                    shard_id,
                    "vin_points",
                    exc.path,
                    f"{count} unreadable vin_points record{'s' if count != 1 else ''}; "
                    f"first: {exc}",
                )
            )
        for (shard_id, block), count in sorted(self.nonfinite.items()):
            problems.append(
                StoreIntegrityProblem(
                    "NonFiniteValues",
                    shard_id,
                    block,
                    self.reader.access.describe(f"shards/{shard_id}"),
                    f"shard {shard_id!r} block {block!r}: {count} non-finite value"
                    f"{'s' if count != 1 else ''} in scanned rows where the format allows none"
                    + (
                        " (infinite RRI)" if block.startswith(("rri", RRI_COMPONENT_PREFIX)) else ""
                    ),
                )
            )
        for shard_id, count in sorted(self.duplicate_ids.items()):
            problems.append(
                StoreIntegrityProblem(
                    "DuplicateCandidateIds",
                    shard_id,
                    "candidate_ids",
                    self.reader.access.describe(f"shards/{shard_id}"),
                    f"shard {shard_id!r}: {count} scanned row{'s' if count != 1 else ''} repeat "
                    "a candidate id; those candidates are left out of RRI/component pairs",
                )
            )

        backbone = []
        for name in sorted(self.backbone):
            count, mean, std, abs_mean, nz = self.backbone[name].finish()
            shape = self.backbone_shape[name]
            backbone.append(
                VinOfflineBackboneDiagnostic(
                    field=name,
                    shape=shape,
                    numel=math.prod(shape),
                    sampled_rows=self.backbone_rows[name],
                    count=count,
                    mean=mean,
                    std=std,
                    abs_mean=abs_mean,
                    nz_frac=nz,
                )
            )

        summaries = []
        for si in sorted(self.row_info):
            row = samples[si]
            info = self.row_info[si]
            summaries.append(
                VinOfflineSampleDiagnostic(
                    sample_index=si,
                    sample_key=row.sample_key,
                    scene_id=row.scene_id,
                    snippet_id=row.snippet_id,
                    split=row.split,
                    shard_id=row.shard_id,
                    row=row.row,
                    candidate_count=info.candidate_count if self.labels else None,
                    rri=info.rri if self.labels else None,
                    vin_points=info.vin_points,
                )
            )

        def column(reservoir: _Reservoir) -> list[float]:
            values: list[float] = reservoir.rows()[:, 0].tolist()
            return values

        memory = [
            _memory_record(name, counts)
            for name, counts in self.memory.items()
            if name in ("vin_points", "total") or any(v for v in counts)
        ]
        return VinOfflineDatasetStats(
            store_dir=str(self.reader.store_dir),
            version=manifest.version,
            num_samples=len(samples),
            sampled_samples=len(self.selected),
            split_counts=split_counts,
            num_scenes=len({row.scene_id for row in samples}),
            num_snippets=len({(row.scene_id, row.snippet_id) for row in samples}),
            materialized_blocks=dict(manifest.materialized_blocks.model_dump()),
            candidate_count=self.candidate_count.record() if self.labels else None,
            rri=self.rri.record() if self.labels else None,
            vin_points=self.vin_points.record(),
            numeric_bytes=numeric_bytes,
            block_shapes=block_shapes,
            block_diagnostics=block_diagnostics,
            sample_summaries=summaries,
            candidate_count_values=[int(v) for v in column(self.candidate_count_values)],
            rri_values=column(self.rri_values),
            vin_point_values=[int(v) for v in column(self.vin_point_values)],
            rri_component_values={
                name: column(self.component_values[name]) for name in sorted(self.component_values)
            },
            rri_component_summaries={
                name: self.component_summaries[name].record()
                for name in sorted(self.component_summaries)
            },
            candidate_pose_values={
                name: column(self.pose_values[name])
                for name in POSE_DIAGNOSTICS
                if self.pose_summaries[name].count
            },
            candidate_pose_summaries={
                name: self.pose_summaries[name].record()
                for name in POSE_DIAGNOSTICS
                if self.pose_summaries[name].count
            },
            memory_diagnostics=memory,
            backbone_diagnostics=backbone,
            scene_labels_available=self.labels,
            batch_shapes_available=batch_ok,
            batch_shapes=batch_shapes,
            rri_component_pairs={
                name: _pairs(self.component_pairs[name]) for name in sorted(self.component_pairs)
            },
            rri_pairing_unavailable_sample_keys=list(self.unpaired_keys),
            integrity_problems=problems,
            rri_pairing_unavailable_count=self.unpaired_count,
            max_samples=self.max_samples,
            generation=generation.to_json_dict(),
        )


def _pairs(reservoir: _Reservoir) -> list[tuple[float, float]]:
    rows = reservoir.rows()
    return list(zip(rows[:, 0].tolist(), rows[:, 1].tolist(), strict=True))


def _batch_preview(
    reader: VinOfflineStoreReader, indices: Sequence[int], labels: bool
) -> tuple[dict[str, tuple[int, ...]], bool, StoreIntegrityProblem | None]:
    """Shapes of one real ``VinOracleBatch``: dataset samples through the dataset's collate.

    Rows come from ``read_sample`` of the already open (generation-checked) reader, the
    call ``VinOfflineDataset.__getitem__`` makes, turned into ``VinOracleSample`` tensors
    by the same ``to_oracle_sample``, and batched by ``collate_vin_oracle_batch``. Opening a second dataset
    would parse ``sample_index.jsonl`` again and could see another generation.
    """
    if not labels or not indices:
        return {}, False, None
    from vinlens.store.dataset import collate_vin_oracle_batch, to_oracle_sample

    items = []
    try:
        for index in indices:
            items.append(to_oracle_sample(reader.samples[index], reader.read_sample(index)))
        batch = collate_vin_oracle_batch(items)
    except (VinOfflineStoreError, ValueError) as exc:
        path = exc.path if isinstance(exc, VinOfflineStoreError) else reader.access.root
        problem = StoreIntegrityProblem(
            type(exc).__name__, None, None, path, f"batch preview failed: {exc}"
        )
        return {}, False, problem
    return batch.shapes(), True, None


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def capture_vin_offline_dataset_stats_request(
    store: VinOfflineStoreConfig | str | os.PathLike[str],
    *,
    max_samples: int | None = 512,
) -> VinOfflineDatasetStatsRequest:
    """Capture a root-only diagnostics request without reading payload arrays.

    Reads the top-level stats and the manifest bytes (for its SHA-256) only.
    """
    _check_max_samples(max_samples)
    config = as_store_config(store)
    generation = capture_store_generation(config)
    selection = VinOfflineStoreSelection(
        store_dir=generation.store_dir.path, storage_options=config.storage_options
    )
    return VinOfflineDatasetStatsRequest(
        selection=selection, generation=generation, max_samples=max_samples
    )


def _replaced(request: VinOfflineDatasetStatsRequest, when: str) -> VinOfflineStoreReplacedError:
    return VinOfflineStoreReplacedError(
        f"store was replaced or changed {when}",
        path=request.selection.store_dir,
        expected="the generation captured by the request "
        f"(manifest sha256 {request.generation.manifest_sha256[:12]}...)",
    )


def _current_generation(config: VinOfflineStoreConfig) -> StoreGeneration | None:
    try:
        return capture_store_generation(config)
    except (VinOfflineStoreError, OSError):
        return None


def inspect_vin_offline_dataset_stats(
    request: VinOfflineDatasetStatsRequest,
) -> VinOfflineDatasetStats:
    """Acquire detached root statistics while rejecting pre-read or mid-read replacement.

    The path's generation must equal the request's before reading; the reader's
    generation (taken from the very handles it read ``manifest.json`` and
    ``sample_index.jsonl`` through) must too; and so must the path's generation after
    everything was read. Otherwise :class:`VinOfflineStoreReplacedError` is raised and
    nothing is returned. Errors met while reading a store that was replaced meanwhile
    are reported as that replacement.
    """
    return inspect_vin_offline_dataset_stats_with_progress(request, None)


def inspect_vin_offline_dataset_stats_with_progress(
    request: VinOfflineDatasetStatsRequest,
    progress_cb: Callable[[int, int], None] | None,
) -> VinOfflineDatasetStats:
    """:func:`inspect_vin_offline_dataset_stats` calling ``progress_cb(rows_done, rows_total)``.

    Called with ``rows_done=0`` first and after each shard (for CLIs and widgets).
    """
    config = VinOfflineStoreConfig(
        store_dir=request.selection.store_dir,
        storage_options=request.selection.storage_options,
    )
    if _current_generation(config) != request.generation:
        raise _replaced(request, "before the read started")
    try:
        reader = VinOfflineStoreReader(config)
    except (VinOfflineStoreError, OSError) as exc:
        if _current_generation(config) != request.generation:
            raise _replaced(request, "while it was being opened") from exc
        raise
    try:
        if reader.generation != request.generation:
            raise _replaced(request, "between the request and the read")
        try:
            scan = _StatsScan(reader, request.max_samples)
            scan.run(progress_cb)
            preview_rows = sorted(scan.summary_rows)[:BATCH_PREVIEW_SIZE]
            shapes, batch_ok, problem = _batch_preview(reader, preview_rows, scan.labels)
            if problem is not None:
                scan.problems.append(problem)
            result = scan.record(shapes, batch_ok, request.generation)
        except VinOfflineStoreReplacedError:
            raise
        except Exception as exc:
            if _current_generation(config) != request.generation:
                raise _replaced(request, "while it was being read") from exc
            raise
        try:
            reader.check_generation()
        except StoreReplacedError as exc:
            raise _replaced(request, "while it was being read") from exc
        if _current_generation(config) != request.generation:
            raise _replaced(request, "while it was being read")
        return result
    finally:
        reader.close()


def collect_vin_offline_dataset_stats(
    store: VinOfflineStoreConfig | str | os.PathLike[str],
    *,
    max_samples: int | None = 512,
) -> VinOfflineDatasetStats:
    """Collect coverage, shape, RRI, and memory diagnostics for a VIN store.

    ``max_samples`` caps the rows scanned for per-sample tensor statistics (chosen as the
    module docstring describes); ``None`` scans the whole store with bounded memory.
    Equivalent to capturing a request and inspecting it at once.
    """
    request = capture_vin_offline_dataset_stats_request(store, max_samples=max_samples)
    return inspect_vin_offline_dataset_stats(request)
