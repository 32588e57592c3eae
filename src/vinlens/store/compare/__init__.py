"""Compare two VIN offline stores: what moved between store versions, field by field.

:func:`compare_vin_offline_stores` scans both stores with the machinery of the store
statistics (the same row selection, windowed chunk-checked reads, per-shard partials
folded in manifest order, in process or on any executor) and counts every numeric field
on one shared binning fixed by the number format, so no first pass is needed and the
partials merge exactly (the package's ``_binning`` states the bins, the
metrics and their resolution; ``_scan`` which fields there are).
Both stores are only read; their generations are pinned before the scan and checked in
every worker and after it.

The package's private modules: ``_compare`` (the operation), ``_scan`` (per-shard partials of both stores, the
fields and the camera/channel rule), ``_binning`` (the one shared binning: float16 bit
patterns, float32 top 16 bits; PSI, JS, Wasserstein, KS) and ``_records``
(``StoreComparison``, ``FieldDrift``, ``ranked_fields``). It sits above
:mod:`vinlens.store.diagnostics`, whose scanning core
(:mod:`~vinlens.store.diagnostics.shard_reads`) it reuses; diagnostics never imports it.
"""

from __future__ import annotations

from vinlens.store.compare._binning import (
    FLOAT32_RELATIVE_RESOLUTION,
    PSI_BINS,
    PSI_EPSILON,
)
from vinlens.store.compare._compare import compare_vin_offline_stores
from vinlens.store.compare._records import (
    DRIFT_METRICS,
    FieldDrift,
    StoreComparison,
    ranked_fields,
)
from vinlens.store.compare._scan import CAMERA_AXIS_MAX

__all__ = [
    "CAMERA_AXIS_MAX",
    "DRIFT_METRICS",
    "FLOAT32_RELATIVE_RESOLUTION",
    "PSI_BINS",
    "PSI_EPSILON",
    "FieldDrift",
    "StoreComparison",
    "compare_vin_offline_stores",
    "ranked_fields",
]
