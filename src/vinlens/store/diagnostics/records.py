"""The diagnostics records: what a statistics or coverage run returns, and its request."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

# Re-exported: code written against this module imports the error from here.
from vinlens.store.errors import VinOfflineStoreReplacedError as VinOfflineStoreReplacedError
from vinlens.store.reader import StoreGeneration, StoreIntegrityProblem

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


# --------------------------------------------------------------------------------------
# Records (fields in the order positional construction relies on; later ones have defaults)
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
    ``minimum`` and ``maximum`` of the finite values (exact) come last, after the fields
    positional construction relies on.
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
    minimum: float | None = None
    maximum: float | None = None


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

    After the fields positional construction relies on, with defaults:
    ``integrity_problems`` (missing chunks, blocks that disagree with the manifest,
    unreadable records, non-finite values where the spec allows none, duplicate candidate
    ids), ``rri_pairing_unavailable_count`` (the full count behind the bounded key list),
    ``max_samples`` (the request's budget) and ``generation`` (the store generation the
    numbers were read from, JSON form).
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
        # The request is canonical: an int (not an integral float) or None.
        if isinstance(self.max_samples, float):
            raise ValueError(
                f"max_samples must be None or an integer >= 0, got {self.max_samples!r}"
            )
        check_max_samples(self.max_samples)

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


def check_max_samples(value: object) -> int | None:
    """The one ``max_samples`` rule, for the engine, the CLI and the widgets.

    ``None`` scans every row; an integer ``n >= 0`` scans at most ``n`` rows (``0`` reads
    only the manifest, the sample index and the integrity checks: no payload rows). Every
    number with an integral value counts as that integer, whatever its type: Python and
    numpy integers (``np.int64(5)``), and floats with an integral value (``8.0``, the JSON
    numbers of a browser); booleans, fractional, negative or non-finite numbers and
    anything that is not a number raise :class:`ValueError` naming the value. Returns the
    normalised value (a Python ``int``).
    """
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not _is_bool(value):
        count = int(value)
    elif (
        isinstance(value, numbers.Number)
        and not isinstance(value, numbers.Integral)
        and not isinstance(value, complex)
        and _integral_value(value)
    ):
        count = int(value)  # type: ignore[call-overload]
    else:
        raise ValueError(f"max_samples must be None or an integer >= 0, got {value!r}")
    if count < 0:
        raise ValueError(f"max_samples must be None or an integer >= 0, got {value!r}")
    return count


def _is_bool(value: object) -> bool:
    # numpy's bool_ is not a bool subclass (nor numbers.Integral), but say so by name.
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")


def _integral_value(value: object) -> bool:
    try:
        wide = float(value)  # type: ignore[arg-type]
        return math.isfinite(wide) and value == int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return False
