"""What :class:`~vinlens.widgets.RunCompareWidget` sends: two runs' records thinned for display.

The browser gets engine records only, bounded whatever the length of the runs:

- each run's every-step loss and global gradient norm (``step_series()``), bucketed as the
  training monitor's curves are (:func:`~vinlens.widgets.training_monitor_payload.series_payload`);
- the :class:`~vinlens.health.RunDivergence`: its scalar fields as they are, its per-module
  rows as binary arrays (the first differing step of each module's weights, outputs and
  gradients; -1 where they never differ), so a model of thousands of modules stays a few
  buffers;
- the module x step relative difference (``relative_difference``): at most
  :data:`~vinlens.widgets.training_monitor_payload.MAX_HEATMAP_CELLS` cells; past that,
  consecutive steps share a column showing their largest difference (NaN only where every
  step of the column is NaN), so the first divergent step is never thinned away.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vinlens.widgets._payload import encode_array, to_jsonable
from vinlens.widgets.training_monitor_payload import heatmap_columns, series_payload, thin_columns

__all__ = [
    "DIFFERENCE_FIELDS",
    "curves_payload",
    "difference_payload",
    "divergence_payload",
]

#: The statistics whose relative difference the heatmap can show, in the picker's order:
#: the every-step fingerprints first (every step both runs logged), then the sampled output
#: std (the sampled steps both logged).
DIFFERENCE_FIELDS = ("grad_norm", "weight_norm", "std")

_MODULE_STEPS = ("weights", "outputs", "grads")


def divergence_payload(divergence: Any) -> dict[str, Any]:
    """A ``RunDivergence`` as sent: scalars as JSON, its module rows as arrays."""
    payload: dict[str, Any] = {
        name: to_jsonable(getattr(divergence, name))
        for name in (
            "identical",
            "steps_compared",
            "ranks",
            "first_step",
            "rank",
            "cause",
            "module",
            "field",
            "value_a",
            "value_b",
            "unmatched",
            "note",
        )
    }
    modules = divergence.modules
    payload["module_paths"] = [m.path for m in modules]
    for name in _MODULE_STEPS:
        steps = [-1 if getattr(m, name) is None else int(getattr(m, name)) for m in modules]
        payload[f"module_{name}"] = encode_array(np.asarray(steps, dtype=np.int64))
    return payload


def difference_payload(matrix: Any) -> dict[str, Any]:
    """A ``relative_difference`` ``HistoryMatrix``, thinned to its bound: ``values``
    (modules x columns, float32), each column's first step, the steps it covers."""
    steps = np.asarray(matrix.steps, dtype=np.int64)
    values, starts = thin_columns(
        np.asarray(matrix.values, dtype=np.float64), heatmap_columns(len(matrix.module_paths))
    )
    return {
        "field": matrix.field,
        "paths": list(matrix.module_paths),
        "values": encode_array(np.asarray(values, dtype=np.float32)),
        "steps": encode_array(steps[starts]),
        "samples": len(steps),
        "step_range": [int(steps[0]), int(steps[-1])] if len(steps) else [],
    }


def curves_payload(series_a: Any, series_b: Any) -> dict[str, Any]:
    """Both runs' every-step curves (``StepSeries``), each bucketed on its own steps."""
    return {
        "a": series_payload(series_a.steps, series_a.grad_norm, series_a.loss),
        "b": series_payload(series_b.steps, series_b.grad_norm, series_b.loss),
    }
