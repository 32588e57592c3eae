"""Seeded, deterministic synthetic VIN offline stores and matching raw ASE tar shards.

For tests, notebooks, the CLI demo and benchmarks. Everything is a pure function of the
spec (seed included): two calls with equal specs write byte-identical payloads (only
``created_at`` in the manifest differs). The returned frozen records say what was planted
(which snippets are missing from the store, which are outside the raw data, which
samples lack candidate ids, ...) so callers assert against facts, not guesses.

Realism, in brief: several scenes and snippets, several samples per snippet, splits per
snippet; candidates with invalid and padded entries (``candidate_ids`` -1, never valid),
NaN RRI for some valid candidates, RRI components correlated with RRI, candidate poses at
0.5-3 m from the rig with unit quaternions, float16 and float32 backbone fields, one
sample with no valid candidate at all, and the last shards without ``candidate_ids``
(rows that cannot be paired by identity). Raw data: WebDataset-style tar shards in
ustar, GNU and pax formats, GNU and pax ones with member names longer than 100 bytes,
plus members whose keys do not name a scene and snippet.
"""

from __future__ import annotations

import io
import math
import os
import tarfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from vinlens.store.format import VinOfflineSample, VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.writer import VinOfflineStoreWriter

__all__ = [
    "SyntheticDatasetRecord",
    "SyntheticRawDatasetRecord",
    "SyntheticRawSpec",
    "SyntheticStoreRecord",
    "SyntheticStoreSpec",
    "make_synthetic_samples",
    "scene_id_for",
    "snippet_id_for",
    "write_synthetic_dataset",
    "write_synthetic_raw_dataset",
    "write_synthetic_samples",
    "write_synthetic_store",
]

SnippetPair = tuple[str, str]


def scene_id_for(index: int) -> str:
    """ASE-style scene id, e.g. ``scene_000001`` (1-based)."""
    return f"scene_{index:06d}"


def snippet_id_for(index: int) -> str:
    """ASE-style snippet id, e.g. ``snippet_000004`` (1-based)."""
    return f"snippet_{index:06d}"


@dataclass(frozen=True)
class SyntheticStoreSpec:
    """What to generate. Defaults make a small store (about 24 samples, 3 shards, < 1 MB).

    ``backbone_fields`` are ``(name, per-row shape, dtype)``; ``unpaired_shards`` trailing
    shards are written without ``candidate_ids`` (labelled stores with ids only).
    ``outside_snippets_per_scene`` store snippets per scene are left out of the raw data.
    """

    num_scenes: int = 3
    snippets_per_scene: int = 4
    samples_per_snippet: int = 2
    num_candidates: int = 16
    rows_per_shard: int = 8
    seed: int = 0
    scene_labels: bool = True
    rri_components: tuple[str, ...] = ("visibility", "novelty")
    candidate_ids: bool = True
    candidate_poses: bool = True
    backbone_fields: tuple[tuple[str, tuple[int, ...], str], ...] = (
        ("voxel_features", (8, 4, 4), "float16"),
        ("global_features", (32,), "float32"),
    )
    vin_points_range: tuple[int, int] = (16, 160)
    splits: tuple[tuple[str, float], ...] = (("train", 0.7), ("val", 0.2), ("test", 0.1))
    nan_rri_fraction: float = 0.1
    invalid_candidate_fraction: float = 0.2
    padded_candidates: int = 2
    unpaired_shards: int = 1
    outside_snippets_per_scene: int = 1

    def __post_init__(self) -> None:
        if self.num_scenes < 1 or self.snippets_per_scene < 1 or self.samples_per_snippet < 1:
            raise ValueError("num_scenes, snippets_per_scene and samples_per_snippet must be >= 1")
        if self.num_candidates < 1:
            raise ValueError("num_candidates must be >= 1")
        if not 0 <= self.padded_candidates < self.num_candidates:
            raise ValueError("padded_candidates must be in [0, num_candidates)")
        lo, hi = self.vin_points_range
        if not 0 <= lo <= hi:
            raise ValueError(
                f"vin_points_range {self.vin_points_range} must satisfy 0 <= low <= high"
            )
        if not self.splits or any(w <= 0 for _, w in self.splits):
            raise ValueError("splits need at least one (name, positive weight)")
        if not 0 <= self.outside_snippets_per_scene <= self.snippets_per_scene:
            raise ValueError("outside_snippets_per_scene must be in [0, snippets_per_scene]")
        for name, _shape, dtype in self.backbone_fields:
            if dtype not in ("float16", "float32"):
                raise ValueError(
                    f"backbone field {name!r}: dtype {dtype!r} must be float16 or float32"
                )

    @property
    def num_samples(self) -> int:
        return self.num_scenes * self.snippets_per_scene * self.samples_per_snippet


@dataclass(frozen=True)
class SyntheticRawSpec:
    """Raw ASE-style tar shards matching a synthetic store, with planted gaps.

    ``missing_snippets_per_scene`` raw snippets per store scene are absent from the store,
    plus a seeded 0..``missing_snippets_spread`` more per scene (so coverage varies by scene);
    ``raw_only_scenes`` whole scenes exist only in the raw data; ``unparseable_members``
    members have keys with no scene/snippet; every ``long_name_every``-th snippet in a
    GNU or pax tar gets a directory prefix making its member names longer than 100 bytes.
    """

    num_tars: int = 3
    member_suffixes: tuple[str, ...] = ("rgb.jpg", "depth.png", "meta.json")
    member_bytes: int = 64
    missing_snippets_per_scene: int = 1
    missing_snippets_spread: int = 0
    raw_only_scenes: int = 1
    unparseable_members: int = 2
    long_name_every: int = 2
    formats: tuple[str, ...] = ("ustar", "gnu", "pax")

    def __post_init__(self) -> None:
        if self.num_tars < 1:
            raise ValueError("num_tars must be >= 1")
        if self.missing_snippets_per_scene < 0 or self.missing_snippets_spread < 0:
            raise ValueError("missing_snippets_per_scene and missing_snippets_spread must be >= 0")
        unknown = set(self.formats) - {"ustar", "gnu", "pax"}
        if unknown or not self.formats:
            raise ValueError(f"formats must be drawn from ustar, gnu, pax; got {self.formats}")
        if not self.member_suffixes:
            raise ValueError("member_suffixes must not be empty")


@dataclass(frozen=True)
class SyntheticStoreRecord:
    """What :func:`write_synthetic_store` wrote."""

    config: VinOfflineStoreConfig
    spec: SyntheticStoreSpec
    num_samples: int
    shard_ids: tuple[str, ...]
    scene_ids: tuple[str, ...]
    store_pairs: frozenset[SnippetPair]
    split_counts: Mapping[str, int]
    sample_keys: tuple[str, ...]
    unpaired_sample_keys: tuple[str, ...]
    no_valid_candidate_sample_keys: tuple[str, ...]
    materialized_blocks: Mapping[str, bool]

    @property
    def store_dir(self) -> Path:
        # Synthetic stores are always written to a local directory.
        return Path(self.config.store_dir)


@dataclass(frozen=True)
class SyntheticRawDatasetRecord:
    """What :func:`write_synthetic_raw_dataset` wrote and planted."""

    raw_dir: Path
    tar_paths: tuple[Path, ...]
    tar_formats: tuple[str, ...]
    member_names: tuple[str, ...]
    raw_pairs: frozenset[SnippetPair]
    raw_scene_ids: tuple[str, ...]
    missing_in_store: tuple[SnippetPair, ...]
    outside_dataset: tuple[SnippetPair, ...]
    covered: tuple[SnippetPair, ...]
    unparseable_members: tuple[str, ...]
    long_name_members: tuple[str, ...]


@dataclass(frozen=True)
class SyntheticDatasetRecord:
    """A store and its raw dataset; ``config`` has both directories set."""

    config: VinOfflineStoreConfig
    store: SyntheticStoreRecord
    raw: SyntheticRawDatasetRecord
    extra: Mapping[str, object] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------


def _split_for(rng: np.random.Generator, splits: tuple[tuple[str, float], ...]) -> str:
    weights = np.array([w for _, w in splits], dtype=np.float64)
    return splits[int(rng.choice(len(splits), p=weights / weights.sum()))][0]


def _random_quaternions(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 0] < 0] *= -1  # qw >= 0: one representative per rotation
    return q


def make_synthetic_samples(spec: SyntheticStoreSpec) -> list[VinOfflineSample]:
    """The samples of a synthetic store, in write order (deterministic in ``spec``)."""
    rng = np.random.default_rng(spec.seed)
    c = spec.num_candidates
    shards_total = math.ceil(spec.num_samples / spec.rows_per_shard)
    with_ids_rows = spec.num_samples
    if spec.scene_labels and spec.candidate_ids and spec.unpaired_shards > 0:
        unpaired = min(spec.unpaired_shards, shards_total - 1) if shards_total > 1 else 0
        with_ids_rows = (shards_total - unpaired) * spec.rows_per_shard
    no_valid_index = spec.num_samples // 2
    samples: list[VinOfflineSample] = []
    index = 0
    for s in range(1, spec.num_scenes + 1):
        scene = scene_id_for(s)
        center = rng.normal(scale=5.0, size=3)
        for n in range(1, spec.snippets_per_scene + 1):
            snippet = snippet_id_for(n)
            split = _split_for(rng, spec.splits)
            for k in range(spec.samples_per_snippet):
                lo, hi = spec.vin_points_range
                num_points = int(rng.integers(lo, hi + 1))
                points = (center + rng.normal(scale=1.5, size=(num_points, 3))).astype(np.float32)
                valid = rng.random(c) >= spec.invalid_candidate_fraction
                pad = spec.padded_candidates
                if pad:
                    valid[c - pad :] = False
                if index == no_valid_index:
                    valid[:] = False
                rri = rng.beta(2.0, 5.0, size=c).astype(np.float32)
                rri[rng.random(c) < spec.nan_rri_fraction] = np.nan
                if pad:
                    rri[c - pad :] = np.nan
                components = {}
                for j, name in enumerate(spec.rri_components):
                    noise = rng.normal(scale=0.05, size=c)
                    comp = (rri * (0.5 + 0.25 * j) + noise).astype(np.float32)
                    components[name] = comp
                ids = np.full(c, -1, dtype=np.int64)
                ids[: c - pad] = rng.permutation(4 * c)[: c - pad]
                distance = rng.uniform(0.5, 3.0, size=c)
                direction = rng.normal(size=(c, 3))
                direction /= np.linalg.norm(direction, axis=1, keepdims=True)
                poses = np.concatenate(
                    [direction * distance[:, None], _random_quaternions(rng, c)], axis=1
                ).astype(np.float32)
                backbone = {}
                for name, shape, dtype in spec.backbone_fields:
                    scale = 0.5 if dtype == "float16" else 1.0
                    value = rng.normal(scale=scale, size=shape)
                    value[np.abs(value) < 0.05] = 0.0  # some exact zeros, as after a ReLU
                    backbone[name] = value.astype(dtype)
                labelled = spec.scene_labels
                samples.append(
                    VinOfflineSample(
                        sample_key=f"{scene}/{snippet}/{k:03d}",
                        scene_id=scene,
                        snippet_id=snippet,
                        split=split,
                        vin_points=points,
                        candidate_valid=valid if labelled else None,
                        rri=rri if labelled else None,
                        rri_components=components if labelled else {},
                        candidate_ids=ids
                        if labelled and spec.candidate_ids and index < with_ids_rows
                        else None,
                        candidate_poses=poses if spec.candidate_poses else None,
                        backbone=backbone,
                    )
                )
                index += 1
    return samples


def write_synthetic_samples(
    store_dir: str | os.PathLike[str],
    samples: Sequence[VinOfflineSample],
    *,
    num_candidates: int,
    scene_labels: bool = True,
    rows_per_shard: int = 8,
    replace: bool = False,
    fsync: bool = False,
    compressor: Literal["zstd"] | None = None,
) -> Path:
    """Publish ``samples`` (e.g. :func:`make_synthetic_samples` with a planted change) as a store.

    A new shard starts wherever the samples' set of blocks changes, so samples without
    ``candidate_ids`` (or any optional block) never share a shard with samples that have it.
    """
    with VinOfflineStoreWriter(
        store_dir,
        num_candidates=num_candidates,
        scene_labels=scene_labels,
        rows_per_shard=rows_per_shard,
        replace=replace,
        fsync=fsync,
        compressor=compressor,
    ) as writer:
        previous: frozenset[str] | None = None
        for sample in samples:
            blocks = frozenset(sample.zarr_blocks())
            if previous is not None and blocks != previous:
                writer.finish_shard()
            previous = blocks
            writer.add(sample)
    return Path(store_dir)


def write_synthetic_store(
    store_dir: str | os.PathLike[str],
    spec: SyntheticStoreSpec | None = None,
    *,
    replace: bool = False,
    fsync: bool = False,
    compressor: Literal["zstd"] | None = None,
) -> SyntheticStoreRecord:
    """Generate and publish a synthetic store at ``store_dir`` (see :class:`SyntheticStoreSpec`);
    ``compressor`` as for :class:`~vinlens.store.writer.VinOfflineStoreWriter`."""
    spec = spec or SyntheticStoreSpec()
    samples = make_synthetic_samples(spec)
    write_synthetic_samples(
        store_dir,
        samples,
        num_candidates=spec.num_candidates,
        scene_labels=spec.scene_labels,
        rows_per_shard=spec.rows_per_shard,
        replace=replace,
        fsync=fsync,
        compressor=compressor,
    )
    with VinOfflineStoreReader(store_dir) as reader:
        shard_ids = reader.manifest.shard_ids
        flags = reader.manifest.materialized_blocks.model_dump()
    return SyntheticStoreRecord(
        config=VinOfflineStoreConfig(store_dir=Path(store_dir).absolute()),
        spec=spec,
        num_samples=len(samples),
        shard_ids=shard_ids,
        scene_ids=tuple(sorted({s.scene_id for s in samples})),
        store_pairs=frozenset((s.scene_id, s.snippet_id) for s in samples),
        split_counts=dict(sorted(Counter(s.split for s in samples).items())),
        sample_keys=tuple(s.sample_key for s in samples),
        unpaired_sample_keys=tuple(
            s.sample_key for s in samples if spec.scene_labels and s.candidate_ids is None
        ),
        no_valid_candidate_sample_keys=tuple(
            s.sample_key
            for s in samples
            if s.candidate_valid is not None and not bool(s.candidate_valid.any())
        ),
        materialized_blocks=flags,
    )


# --------------------------------------------------------------------------------------
# Raw tar shards
# --------------------------------------------------------------------------------------

_TAR_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
_LONG_PREFIX = (
    "ase_raw_release/" + "/".join(f"long_directory_level_{i:02d}" for i in range(6)) + "/"
)


def write_synthetic_raw_dataset(
    raw_dir: str | os.PathLike[str],
    store: SyntheticStoreRecord,
    spec: SyntheticRawSpec | None = None,
    *,
    seed: int | None = None,
) -> SyntheticRawDatasetRecord:
    """Write WebDataset-style tar shards for the store's scenes with planted coverage gaps.

    Raw snippets per store scene: the store's snippets except the last
    ``outside_snippets_per_scene`` (those become *outside the raw data*), plus
    ``missing_snippets_per_scene`` new ones (*missing from the store*); plus
    ``raw_only_scenes`` scenes the store never saw. Members of one snippet are contiguous
    and snippets are spread over ``num_tars`` tars in key order.
    """
    spec = spec or SyntheticRawSpec()
    raw = Path(raw_dir).absolute()
    raw.mkdir(parents=True, exist_ok=True)
    seed = store.spec.seed if seed is None else seed
    pairs = _raw_pairs(store.spec, spec, seed)
    tars = _write_raw_tars(raw, pairs, spec, np.random.default_rng(seed))
    raw_pairs = frozenset(pairs)
    return SyntheticRawDatasetRecord(
        raw_dir=raw,
        tar_paths=tuple(tars.paths),
        tar_formats=tuple(tars.formats),
        member_names=tuple(tars.members),
        raw_pairs=raw_pairs,
        raw_scene_ids=tuple(sorted({scene for scene, _ in pairs})),
        missing_in_store=tuple(sorted(raw_pairs - store.store_pairs)),
        outside_dataset=tuple(sorted(store.store_pairs - raw_pairs)),
        covered=tuple(sorted(raw_pairs & store.store_pairs)),
        unparseable_members=tuple(tars.unparseable),
        long_name_members=tuple(tars.long_names),
    )


def _raw_pairs(sspec: SyntheticStoreSpec, spec: SyntheticRawSpec, seed: int) -> list[SnippetPair]:
    """The raw snippets, sorted: kept store snippets, planted missing ones, raw-only scenes."""
    keep = sspec.snippets_per_scene - sspec.outside_snippets_per_scene
    pairs: list[SnippetPair] = []
    # A separate stream, so a spread of 0 leaves every other generated byte unchanged.
    spread_rng = np.random.default_rng(seed + 1)
    for s in range(1, sspec.num_scenes + 1):
        for n in range(1, keep + 1):
            pairs.append((scene_id_for(s), snippet_id_for(n)))
        extra = (
            int(spread_rng.integers(0, spec.missing_snippets_spread + 1))
            if spec.missing_snippets_spread
            else 0
        )
        for n in range(spec.missing_snippets_per_scene + extra):
            pairs.append((scene_id_for(s), snippet_id_for(sspec.snippets_per_scene + 1 + n)))
    for s in range(sspec.num_scenes + 1, sspec.num_scenes + 1 + spec.raw_only_scenes):
        for n in range(1, sspec.snippets_per_scene + 1):
            pairs.append((scene_id_for(s), snippet_id_for(n)))
    pairs.sort()
    return pairs


@dataclass
class _RawTars:
    paths: list[Path] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    long_names: list[str] = field(default_factory=list)
    unparseable: list[str] = field(default_factory=list)


def _write_raw_tars(
    raw: Path, pairs: list[SnippetPair], spec: SyntheticRawSpec, rng: np.random.Generator
) -> _RawTars:
    """The tars of ``pairs`` in key order, each snippet's members contiguous."""
    per_tar = math.ceil(len(pairs) / spec.num_tars) if pairs else 0
    out = _RawTars()
    snippet_counter = 0
    for t in range(spec.num_tars):
        fmt = spec.formats[t % len(spec.formats)]
        path = raw / f"shard-{t:06d}.tar"
        chunk = pairs[t * per_tar : (t + 1) * per_tar]
        with tarfile.open(path, "w", format=_TAR_FORMATS[fmt]) as tar:
            for scene, snippet in chunk:
                long = (
                    fmt != "ustar"
                    and spec.long_name_every > 0
                    and snippet_counter % spec.long_name_every == 0
                )
                snippet_counter += 1
                prefix = _LONG_PREFIX if long else ""
                for suffix in spec.member_suffixes:
                    name = f"{prefix}{scene}/{snippet}.{suffix}"
                    _add_member(tar, name, rng.bytes(spec.member_bytes))
                    out.members.append(name)
                    if len(name.encode()) > 100:
                        out.long_names.append(name)
            if t == 0:
                for u in range(spec.unparseable_members):
                    name = f"README_{u}.txt"
                    _add_member(tar, name, b"synthetic ASE raw data\n")
                    out.members.append(name)
                    out.unparseable.append(name)
        out.paths.append(path)
        out.formats.append(fmt)
    return out


def _add_member(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    info.mtime = 1_700_000_000  # fixed: deterministic bytes
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(payload))


def write_synthetic_dataset(
    root: str | os.PathLike[str],
    store_spec: SyntheticStoreSpec | None = None,
    raw_spec: SyntheticRawSpec | None = None,
    *,
    replace: bool = False,
) -> SyntheticDatasetRecord:
    """A store at ``root/store`` and its raw tar shards at ``root/raw``."""
    base = Path(root).absolute()
    store = write_synthetic_store(base / "store", store_spec, replace=replace)
    raw = write_synthetic_raw_dataset(base / "raw", store, raw_spec)
    config = VinOfflineStoreConfig(store_dir=store.store_dir, raw_dataset_dir=raw.raw_dir)
    return SyntheticDatasetRecord(config=config, store=store, raw=raw)
