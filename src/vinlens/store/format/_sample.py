"""One VIN offline sample in memory: what the writer takes and what the reader gives back.

Arrays are numpy (the store's world); the torch view of a sample lives in
:mod:`vinlens.store.dataset`. Block names follow the spec's table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vinlens.store.format._contract import BACKBONE_PREFIX, RRI_COMPONENT_PREFIX

__all__ = ["VinOfflineSample"]


@dataclass(frozen=True, eq=False)
class VinOfflineSample:
    """One sample with its identifiers and per-block arrays.

    ``vin_points`` is float32 ``[n, 3]``. The per-candidate arrays have ``C`` =
    ``num_candidates`` entries: ``candidate_valid`` bool ``[C]``, ``rri`` float32 ``[C]``
    (NaN where undefined), each ``rri_components[name]`` float32 ``[C]``,
    ``candidate_ids`` int64 ``[C]`` (-1 for padding), ``candidate_poses`` float32
    ``[C, 7]``. ``backbone`` maps a field name (no ``backbone.`` prefix) to a float16 or
    float32 array of any fixed shape. ``None``/empty means the block is not stored.
    """

    sample_key: str
    scene_id: str
    snippet_id: str
    split: str
    vin_points: np.ndarray
    candidate_valid: np.ndarray | None = None
    rri: np.ndarray | None = None
    rri_components: Mapping[str, np.ndarray] = field(default_factory=dict)
    candidate_ids: np.ndarray | None = None
    candidate_poses: np.ndarray | None = None
    backbone: Mapping[str, np.ndarray] = field(default_factory=dict)

    def zarr_blocks(self) -> dict[str, np.ndarray]:
        """Per-row arrays keyed by zarr block name (``rri``, ``backbone.<field>``, ...)."""
        blocks: dict[str, np.ndarray] = {}
        if self.candidate_valid is not None:
            blocks["candidate_valid"] = self.candidate_valid
        if self.rri is not None:
            blocks["rri"] = self.rri
        for name, value in self.rri_components.items():
            blocks[f"{RRI_COMPONENT_PREFIX}{name}"] = value
        if self.candidate_ids is not None:
            blocks["candidate_ids"] = self.candidate_ids
        if self.candidate_poses is not None:
            blocks["candidate_poses"] = self.candidate_poses
        for name, value in self.backbone.items():
            blocks[f"{BACKBONE_PREFIX}{name}"] = value
        return blocks

    @property
    def num_vin_points(self) -> int:
        return int(self.vin_points.shape[0])
