"""``VinOfflineDataset``: a torch ``Dataset`` over a store, and the ``VinOracleBatch`` collate.

The dataset validates the manifest and sample index when it is built (fail fast, in the
main process) but opens its :class:`~vinlens.store.reader.VinOfflineStoreReader` lazily,
once per process: DataLoader workers (fork or spawn) each open their own read-only reader
on first ``__getitem__``, and a worker that finds another store generation at the path
than the one the dataset was built on raises :class:`StoreReplacedError` instead of
mixing two stores.

``collate_vin_oracle_batch`` pads variable-length ``vin_points`` into ``[B, N_max, 3]``
with a boolean mask and stacks per-candidate tensors and backbone fields. A per-candidate
block or backbone field is batched only when every sample in the batch has it (optional
blocks may be absent from some shards); otherwise the batch carries ``None`` / omits the
key rather than inventing values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils.data import Dataset

from vinlens.store.errors import StoreReplacedError
from vinlens.store.format import (
    BACKBONE_PREFIX,
    RRI_COMPONENT_PREFIX,
    SampleIndexRow,
    VinOfflineManifest,
    VinOfflineSample,
    VinOfflineStoreConfig,
)
from vinlens.store.reader import StoreGeneration, VinOfflineStoreReader, as_store_config

__all__ = [
    "VinOfflineDataset",
    "VinOracleBatch",
    "VinOracleSample",
    "collate_vin_oracle_batch",
]


@dataclass(frozen=True, eq=False)
class VinOracleSample:
    """One sample as torch tensors plus where it came from (see :class:`VinOfflineSample`)."""

    sample_index: int
    sample_key: str
    scene_id: str
    snippet_id: str
    split: str
    shard_id: str
    row: int
    vin_points: torch.Tensor
    candidate_valid: torch.Tensor | None = None
    rri: torch.Tensor | None = None
    rri_components: Mapping[str, torch.Tensor] = field(default_factory=dict)
    candidate_ids: torch.Tensor | None = None
    candidate_poses: torch.Tensor | None = None
    backbone: Mapping[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class VinOracleBatch:
    """A collated batch of ``B`` samples.

    ``vin_points`` float32 ``[B, N_max, 3]`` (zero padded), ``vin_points_mask`` bool
    ``[B, N_max]`` (True for real points), ``vin_points_lengths`` int64 ``[B]``;
    ``candidate_valid`` bool ``[B, C]``, ``rri`` float32 ``[B, C]``, ``rri_components``
    name -> float32 ``[B, C]``, ``candidate_ids`` int64 ``[B, C]``, ``candidate_poses``
    float32 ``[B, C, 7]``, ``backbone`` field -> ``[B, ...]`` in its stored dtype.
    """

    sample_index: torch.Tensor
    sample_keys: tuple[str, ...]
    scene_ids: tuple[str, ...]
    snippet_ids: tuple[str, ...]
    splits: tuple[str, ...]
    vin_points: torch.Tensor
    vin_points_mask: torch.Tensor
    vin_points_lengths: torch.Tensor
    candidate_valid: torch.Tensor | None = None
    rri: torch.Tensor | None = None
    rri_components: Mapping[str, torch.Tensor] = field(default_factory=dict)
    candidate_ids: torch.Tensor | None = None
    candidate_poses: torch.Tensor | None = None
    backbone: Mapping[str, torch.Tensor] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return int(self.sample_index.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor keyed by its block-style name (``backbone.<f>``, ``rri_components.<c>``)."""
        out: dict[str, torch.Tensor] = {
            "sample_index": self.sample_index,
            "vin_points": self.vin_points,
            "vin_points_mask": self.vin_points_mask,
            "vin_points_lengths": self.vin_points_lengths,
        }
        for name in ("candidate_valid", "rri", "candidate_ids", "candidate_poses"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        for name, value in self.rri_components.items():
            out[f"{RRI_COMPONENT_PREFIX}{name}"] = value
        for name, value in self.backbone.items():
            out[f"{BACKBONE_PREFIX}{name}"] = value
        return out

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every tensor in the batch, keyed as in :meth:`tensors`."""
        return {name: tuple(int(n) for n in t.shape) for name, t in self.tensors().items()}

    def to(self, device: torch.device | str) -> VinOracleBatch:
        """The batch with every tensor moved to ``device``."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            sample_index=self.sample_index.to(device),
            vin_points=self.vin_points.to(device),
            vin_points_mask=self.vin_points_mask.to(device),
            vin_points_lengths=self.vin_points_lengths.to(device),
            candidate_valid=move(self.candidate_valid),
            rri=move(self.rri),
            rri_components={k: v.to(device) for k, v in self.rri_components.items()},
            candidate_ids=move(self.candidate_ids),
            candidate_poses=move(self.candidate_poses),
            backbone={k: v.to(device) for k, v in self.backbone.items()},
        )


def _stack_optional(values: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    if not values or any(v is None for v in values):
        return None
    tensors = [v for v in values if v is not None]
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"cannot batch tensors of different shapes {sorted(shapes)}")
    return torch.stack(tensors)


def _stack_common(maps: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if not maps:
        return {}
    common = [k for k in maps[0] if all(k in m for m in maps[1:])]
    out: dict[str, torch.Tensor] = {}
    for key in common:
        stacked = _stack_optional([m[key] for m in maps])
        if stacked is not None:
            out[key] = stacked
    return out


def collate_vin_oracle_batch(samples: Sequence[VinOracleSample]) -> VinOracleBatch:
    """Collate samples into a :class:`VinOracleBatch` (use as a DataLoader ``collate_fn``)."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    counts = [int(s.vin_points.shape[0]) for s in samples]
    lengths = torch.tensor(counts, dtype=torch.int64)
    max_len = max(counts)
    points = torch.zeros((len(samples), max_len, 3), dtype=torch.float32)
    mask = torch.zeros((len(samples), max_len), dtype=torch.bool)
    for i, (sample, n) in enumerate(zip(samples, counts, strict=True)):
        points[i, :n] = sample.vin_points
        mask[i, :n] = True
    return VinOracleBatch(
        sample_index=torch.tensor([s.sample_index for s in samples], dtype=torch.int64),
        sample_keys=tuple(s.sample_key for s in samples),
        scene_ids=tuple(s.scene_id for s in samples),
        snippet_ids=tuple(s.snippet_id for s in samples),
        splits=tuple(s.split for s in samples),
        vin_points=points,
        vin_points_mask=mask,
        vin_points_lengths=lengths,
        candidate_valid=_stack_optional([s.candidate_valid for s in samples]),
        rri=_stack_optional([s.rri for s in samples]),
        rri_components=_stack_common([s.rri_components for s in samples]),
        candidate_ids=_stack_optional([s.candidate_ids for s in samples]),
        candidate_poses=_stack_optional([s.candidate_poses for s in samples]),
        backbone=_stack_common([s.backbone for s in samples]),
    )


class VinOfflineDataset(Dataset[VinOracleSample]):
    """Samples of one store (optionally one split) as :class:`VinOracleSample` tensors.

    ``split=None`` takes every sample; otherwise only that split's samples, in store order
    (an unknown split is refused listing the available ones). Picklable: workers get the
    config and row table and open their own reader.
    """

    def __init__(
        self, config: VinOfflineStoreConfig | str | os.PathLike[str], split: str | None = None
    ) -> None:
        self.config = as_store_config(config)
        self.split = split
        with VinOfflineStoreReader(self.config) as reader:
            self.manifest: VinOfflineManifest = reader.manifest
            self.generation: StoreGeneration = reader.generation
            rows = reader.samples
        available = sorted({row.split for row in rows})
        if split is not None and split not in available:
            raise ValueError(
                f"{self.config.store_dir}: no split {split!r}; available splits: {available}"
            )
        self.samples: tuple[SampleIndexRow, ...] = tuple(
            row for row in rows if split is None or row.split == split
        )
        self.available_splits: tuple[str, ...] = tuple(available)
        self._reader: VinOfflineStoreReader | None = None
        self._reader_pid: int | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def reader(self) -> VinOfflineStoreReader:
        """This process's reader, opened on first use and checked against the dataset's generation."""
        if self._reader is None or self._reader_pid != os.getpid():
            reader = VinOfflineStoreReader(self.config)
            if reader.generation != self.generation:
                reader.close()
                raise StoreReplacedError(
                    "store at the path is not the one this dataset was built on (replaced since)",
                    path=str(self.config.store_dir),
                    expected="the store generation seen when the dataset was created",
                )
            self._reader = reader
            self._reader_pid = os.getpid()
        return self._reader

    def __getitem__(self, index: int) -> VinOracleSample:
        if not -len(self.samples) <= index < len(self.samples):
            raise IndexError(f"index {index} out of range for {len(self.samples)} samples")
        entry = self.samples[index]
        return to_oracle_sample(entry, self.reader().read_sample(entry.sample_index))

    @staticmethod
    def collate(samples: Sequence[VinOracleSample]) -> VinOracleBatch:
        """Same as :func:`collate_vin_oracle_batch`."""
        return collate_vin_oracle_batch(samples)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        state["_reader_pid"] = None
        return state


def _tensor(value: Any) -> torch.Tensor | None:
    return None if value is None else torch.from_numpy(value)


def to_oracle_sample(entry: SampleIndexRow, sample: VinOfflineSample) -> VinOracleSample:
    """One read sample as :class:`VinOracleSample` tensors, tagged with its index row.

    The one conversion both :meth:`VinOfflineDataset.__getitem__` and the batch-shape
    diagnostic use, so the shapes the diagnostic reports are those training sees.
    ``vin_points`` is copied, so that tensor owns writable memory; the other arrays are
    wrapped without a copy.
    """
    return VinOracleSample(
        sample_index=entry.sample_index,
        sample_key=entry.sample_key,
        scene_id=entry.scene_id,
        snippet_id=entry.snippet_id,
        split=entry.split,
        shard_id=entry.shard_id,
        row=entry.row,
        vin_points=torch.from_numpy(sample.vin_points.copy()),
        candidate_valid=_tensor(sample.candidate_valid),
        rri=_tensor(sample.rri),
        rri_components={k: torch.from_numpy(v) for k, v in sample.rri_components.items()},
        candidate_ids=_tensor(sample.candidate_ids),
        candidate_poses=_tensor(sample.candidate_poses),
        backbone={k: torch.from_numpy(v) for k, v in sample.backbone.items()},
    )
