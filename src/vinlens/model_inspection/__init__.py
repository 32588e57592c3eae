"""Inspect VIN configuration, registered model state, and bounded tensor samples.

The package returns rendering-neutral frozen records. Configuration inspection
(:mod:`~vinlens.model_inspection.config`) walks supported Pydantic structure
without constructing its target; model inspection
(:mod:`~vinlens.model_inspection.structure`) reads registered state without a
forward pass; and numerical capture (:mod:`~vinlens.model_inspection.capture`)
is an explicit hook context around the caller's ordinary forward pass, with an
on-device :class:`TensorSummary` per captured floating tensor
(:mod:`~vinlens.model_inspection.summary`). Plotting, serialization, and
interpretation of these records belong to downstream callers.

Diagnostics never change what they observe: no mode, device or lazy-state
changes in :func:`inspect_model`, no ``setup_target`` call in
:func:`inspect_config`, hooks that return ``None`` in :class:`ModelCapture`.
"""

from __future__ import annotations

from vinlens.model_inspection._naming import ROOT_PATH
from vinlens.model_inspection.capture import (
    CaptureLimits,
    ModelCapture,
    TensorSnapshot,
    capture_model,
)
from vinlens.model_inspection.capture import (
    Direction as Direction,
)
from vinlens.model_inspection.capture import (
    SampleScalar as SampleScalar,
)
from vinlens.model_inspection.config import (
    ConfigFieldSpec,
    ModelStructureSpec,
    inspect_config,
)
from vinlens.model_inspection.config import (
    ConfigValue as ConfigValue,
)
from vinlens.model_inspection.structure import (
    ModelMetadata,
    ModuleMetadata,
    ModuleTree,
    inspect_model,
    module_tree,
)
from vinlens.model_inspection.summary import SummaryAccumulator, TensorSummary, summarize_tensor

__all__ = [
    "ROOT_PATH",
    "CaptureLimits",
    "ConfigFieldSpec",
    "ModelCapture",
    "ModelMetadata",
    "ModelStructureSpec",
    "ModuleMetadata",
    "ModuleTree",
    "SummaryAccumulator",
    "TensorSnapshot",
    "TensorSummary",
    "capture_model",
    "inspect_config",
    "inspect_model",
    "module_tree",
    "summarize_tensor",
]
