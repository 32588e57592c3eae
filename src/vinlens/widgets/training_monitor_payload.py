"""What :class:`~vinlens.widgets.TrainingMonitorWidget` sends: records thinned for display.

The browser gets engine records only, bounded whatever the length of the run:

- the module x sampled-step heatmaps (``HistoryMatrix`` of ``grad_norm`` and ``std``): at
  most :data:`MAX_HEATMAP_CELLS` cells per field and :data:`MAX_COLUMNS` columns; past
  that, consecutive sampled steps share a column, which shows their largest value (an
  infinity wins, NaN only where every step of the column is NaN), so a spike is never
  thinned away. Every sampled step is in a column: thinned, never truncated;
- the every-step loss and global gradient norm (``step_series()`` of a monitor or a run log):
  at most :data:`MAX_SERIES_BUCKETS` buckets of consecutive steps, each sent as its lowest
  and highest finite value and a flag for a non-finite one;
- the non-finite events: the first :data:`~vinlens.health.EVENTS_KEPT` in full, then
  counts (``events_total``, ``last_nonfinite_step``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vinlens.health import EVENTS_KEPT
from vinlens.widgets._payload import encode_array, to_jsonable

__all__ = [
    "HEATMAP_FIELDS",
    "MAX_COLUMNS",
    "MAX_HEATMAP_CELLS",
    "MAX_SERIES_BUCKETS",
    "event_payload",
    "heatmap_payload",
    "monitor_payload",
    "origin_payload",
    "origins_agree",
    "precision_payload",
    "run_payload",
    "series_payload",
    "thin_columns",
]

#: Statistics drawn as heatmaps, in order.
HEATMAP_FIELDS = ("grad_norm", "std")
#: Most columns of one heatmap (a monitor's ring of 512 sampled steps fits unthinned).
MAX_COLUMNS = 512
#: Most cells (modules x columns) of one heatmap: 1 MiB of float32.
MAX_HEATMAP_CELLS = 1 << 18
#: Most buckets of the every-step curves.
MAX_SERIES_BUCKETS = 1000

_Array = np.ndarray[Any, Any]


def _bucket_starts(count: int, buckets: int) -> _Array:
    """Start index of each of ``min(count, buckets)`` runs of consecutive items."""
    n = min(count, buckets)
    return np.unique((np.arange(n, dtype=np.int64) * count) // max(n, 1))


def thin_columns(values: _Array, columns: int) -> tuple[_Array, _Array]:
    """``values`` (rows x n) as at most ``columns`` columns of consecutive ones, each the
    largest value of its run (``fmax``: NaN only where all are NaN); also each column's
    first index into the n."""
    n = values.shape[1]
    if n <= columns:
        return values, np.arange(n, dtype=np.int64)
    starts = _bucket_starts(n, columns)
    # Reduced along the steps of the (steps, rows) layout: a run log's matrix is the
    # transpose of its C-ordered rows, and this reads them in order (2x faster there).
    return np.fmax.reduceat(values.T, starts, axis=0).T, starts


def heatmap_columns(rows: int) -> int:
    """Columns a heatmap of ``rows`` modules gets (at least one)."""
    return max(1, min(MAX_COLUMNS, MAX_HEATMAP_CELLS // max(rows, 1)))


def origin_payload(origin: Any) -> Any:
    """A ``GradientOrigin`` as sent, with its ``entered_nonfinite`` (a property, which
    ``to_jsonable`` does not carry) so the browser reads the engine's answer; None stays."""
    if origin is None:
        return None
    payload: dict[str, Any] = to_jsonable(origin)
    payload["entered_nonfinite"] = bool(origin.entered_nonfinite)
    return payload


def event_payload(event: Any, *, replay: bool = False) -> dict[str, Any]:
    """A ``NonFiniteEvent`` as sent; ``replay`` says the widget can re-execute it (a run
    log with a bundle for its step, and a ``model``)."""
    payload: dict[str, Any] = to_jsonable(event)
    payload["origin"] = origin_payload(event.origin)
    payload["replay"] = bool(replay)
    return payload


def heatmap_payload(matrices: Sequence[Any]) -> dict[str, Any]:
    """The heatmaps of ``HistoryMatrix`` records of one snapshot, thinned to their bound."""
    first = matrices[0]
    steps = np.asarray(first.steps, dtype=np.int64)
    columns = heatmap_columns(len(first.module_paths))
    payload: dict[str, Any] = {"paths": list(first.module_paths)}
    starts = np.arange(len(steps), dtype=np.int64)
    for matrix in matrices:
        values, starts = thin_columns(np.asarray(matrix.values), columns)
        payload[matrix.field] = encode_array(np.asarray(values, dtype=np.float32))
    payload["steps"] = encode_array(steps[starts])  # each column's first sampled step
    payload["samples"] = len(steps)
    payload["step_range"] = [int(steps[0]), int(steps[-1])] if len(steps) else []
    return payload


def _counts(kept: int, total: int, last: int | None) -> dict[str, Any]:
    return {"events_kept": kept, "events_total": total, "last_nonfinite_step": last}


def monitor_payload(monitor: Any) -> dict[str, Any]:
    """What the browser draws of a live ``TrainingMonitor``: heatmaps and counters (its
    events go separately, each once, see :func:`event_payload`)."""
    payload = heatmap_payload(monitor.history_matrices(HEATMAP_FIELDS))
    payload.update(
        source="monitor",
        steps_run=int(monitor.step),
        every=int(monitor.every),
        on_nonfinite=monitor.on_nonfinite,
        ranks=[int(monitor.rank)],
        rank=int(monitor.rank),
        **_counts(len(monitor.events), monitor.nonfinite_count, monitor.last_nonfinite_step),
    )
    return payload


def series_payload(steps: _Array, grad_norm: _Array, loss: _Array) -> dict[str, Any]:
    """The every-step curves in at most :data:`MAX_SERIES_BUCKETS` buckets of consecutive
    steps: each bucket's first step (and ``last_step``), lowest and highest finite value (NaN when it has
    none) and whether it holds a non-finite value."""
    starts = _bucket_starts(len(steps), MAX_SERIES_BUCKETS)
    payload: dict[str, Any] = {"steps": encode_array(np.asarray(steps, np.int64)[starts])}
    for name, series in (("grad_norm", grad_norm), ("loss", loss)):
        values = np.asarray(series, dtype=np.float64)
        bad = ~np.isfinite(values)
        if len(values):
            finite = np.where(bad, np.nan, values)
            lo = np.fmin.reduceat(finite, starts)
            hi = np.fmax.reduceat(finite, starts)
            flags = np.logical_or.reduceat(bad, starts)
        else:
            lo = hi = np.zeros(0)
            flags = np.zeros(0, dtype=bool)
        payload[f"{name}_lo"] = encode_array(lo)
        payload[f"{name}_hi"] = encode_array(hi)
        payload[f"{name}_bad"] = encode_array(flags.astype(np.uint8))
    payload["steps_total"] = len(steps)
    payload["last_step"] = int(steps[-1]) if len(steps) else None
    return payload


def run_payload(run: Any, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The heatmaps and counters, and the every-step curves, of ``rank`` of a ``TrainingRun``.

    The counters are of every rank's events (the events shown are of all ranks)."""
    series = run.step_series(rank)
    payload = heatmap_payload([run.history_matrix(f, rank) for f in HEATMAP_FIELDS])
    events = run.events
    payload.update(
        source="run",
        steps_run=int(series.steps[-1]) + 1 if len(series.steps) else 0,
        every=int(run.meta(rank).get("every", 0)),
        on_nonfinite="",
        ranks=[int(r) for r in run.ranks],
        rank=int(rank),
        log_dir=str(run.log_dir),
        **_counts(
            min(len(events), EVENTS_KEPT),
            len(events),
            max(int(e.step) for e in events) if events else None,
        ),
    )
    return payload, series_payload(series.steps, series.grad_norm, series.loss)


def origins_agree(recorded: Any, recomputed: Any) -> bool:
    """Whether a replay found the recorded origin: module, call index and parameters."""
    if recorded is None or recomputed is None:
        return recorded is None and recomputed is None
    return bool(
        recorded.module_path == recomputed.module_path
        and recorded.call_index == recomputed.call_index
        and tuple(recorded.parameter_paths) == tuple(recomputed.parameter_paths)
    )


def precision_payload(report: Any, paths: list[str]) -> dict[str, Any]:
    """A ``PrecisionReport``'s lowest headroom per module, aligned to ``paths``."""
    if report is None:
        return {}
    lowest = report.lowest_headroom()
    values = np.array([lowest.get(path, np.nan) for path in paths], dtype=np.float64)
    return {
        "dtype": report.dtype,
        "headroom": encode_array(values),
        "first_overflow_path": report.first_overflow_path,
    }
