"""The demo's data: a synthetic VIN offline store and its raw tar shards, made once.

Beside the store lies ``store-v2``, the same store as a team might regenerate it: a new
oracle whose RRI is ``DEMO_SHIFT.rri_scale * rri + DEMO_SHIFT.rri_offset``, one scene
dropped and a few samples added (what the tour's store comparison finds).

``ensure_demo_data()`` generates them into a cache directory the first time (seeded, so
every machine gets the same store) and reuses them afterwards. A ``demo-data.json`` stamp
records the spec that produced them; a changed spec regenerates them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_dataset,
    write_synthetic_samples,
)

__all__ = [
    "DEMO_RAW_SPEC",
    "DEMO_SHIFT",
    "DEMO_STORE_SPEC",
    "DemoData",
    "DemoShift",
    "default_demo_dir",
    "ensure_demo_data",
    "write_shifted_demo_store",
]

DEMO_STORE_SPEC = SyntheticStoreSpec(
    num_scenes=24,
    snippets_per_scene=6,
    samples_per_snippet=2,
    num_candidates=32,
    rows_per_shard=64,
    seed=7,
)
DEMO_RAW_SPEC = SyntheticRawSpec(
    num_tars=6, raw_only_scenes=2, missing_snippets_per_scene=0, missing_snippets_spread=4
)


@dataclass(frozen=True)
class DemoShift:
    """The change planted in the second demo store (see :func:`write_shifted_demo_store`)."""

    rri_scale: float = 1.25
    rri_offset: float = 0.05
    dropped_scene: str = "scene_000003"
    extra_samples: int = 4


DEMO_SHIFT = DemoShift()

_STAMP = "demo-data.json"


@dataclass(frozen=True)
class DemoData:
    """Where the demo's store and raw shards are."""

    root: Path
    store: VinOfflineStoreConfig

    @property
    def store_dir(self) -> Path:
        return Path(self.store.store_dir)

    @property
    def shifted_store(self) -> VinOfflineStoreConfig:
        """The second demo store, with :data:`DEMO_SHIFT` planted."""
        return VinOfflineStoreConfig(store_dir=self.root / "data" / "store-v2")

    @property
    def raw_dir(self) -> Path:
        assert self.store.raw_dataset_dir is not None
        return Path(self.store.raw_dataset_dir)


def default_demo_dir() -> Path:
    """``$VINLENS_DEMO_DIR``, else ``$XDG_CACHE_HOME/vinlens/demo`` (``~/.cache/vinlens/demo``)."""
    explicit = os.environ.get("VINLENS_DEMO_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser().absolute() / "vinlens" / "demo"


def _stamp_payload() -> dict[str, object]:
    return {
        "store_spec": dataclasses.asdict(DEMO_STORE_SPEC),
        "raw_spec": dataclasses.asdict(DEMO_RAW_SPEC),
        "shift": dataclasses.asdict(DEMO_SHIFT),
        "version": 2,
    }


def ensure_demo_data(root: str | os.PathLike[str] | None = None) -> DemoData:
    """Return the demo data under ``root`` (default :func:`default_demo_dir`), making it if needed."""
    base = Path(root).expanduser().absolute() if root is not None else default_demo_dir()
    data_dir = base / "data"
    stamp = data_dir / _STAMP
    expected = json.loads(json.dumps(_stamp_payload()))
    config = VinOfflineStoreConfig(store_dir=data_dir / "store", raw_dataset_dir=data_dir / "raw")
    try:
        current = json.loads(stamp.read_text())
    except (OSError, ValueError):
        current = None
    complete = all((data_dir / d / "manifest.json").exists() for d in ("store", "store-v2"))
    if current != expected or not complete:
        if data_dir.exists():
            shutil.rmtree(data_dir)
        data_dir.mkdir(parents=True)
        write_synthetic_dataset(data_dir, DEMO_STORE_SPEC, DEMO_RAW_SPEC)  # store/ and raw/
        write_shifted_demo_store(data_dir / "store-v2")
        stamp.write_text(json.dumps(expected, indent=2))
    return DemoData(root=base, store=config)


def write_shifted_demo_store(
    store_dir: str | os.PathLike[str],
    spec: SyntheticStoreSpec = DEMO_STORE_SPEC,
    shift: DemoShift = DEMO_SHIFT,
    *,
    replace: bool = False,
) -> Path:
    """Write the store of ``spec`` again with ``shift`` planted; returns its path.

    RRI of every sample becomes ``shift.rri_scale * rri + shift.rri_offset`` (NaN stays
    NaN), the samples of ``shift.dropped_scene`` are left out, and ``shift.extra_samples``
    copies of the first samples are added under new keys of the first scene.
    """
    if not math.isfinite(shift.rri_scale) or not math.isfinite(shift.rri_offset):
        raise ValueError(f"the RRI shift must be finite, got {shift}")
    samples = make_synthetic_samples(spec)
    changed = []
    for sample in samples:
        if sample.scene_id == shift.dropped_scene:
            continue
        rri = sample.rri
        if rri is not None:
            rri = (rri * np.float32(shift.rri_scale) + np.float32(shift.rri_offset)).astype(
                np.float32
            )
        changed.append(dataclasses.replace(sample, rri=rri))
    first = samples[0]
    changed += [
        dataclasses.replace(changed[i], sample_key=f"{first.scene_id}/added/{i:03d}")
        for i in range(min(shift.extra_samples, len(changed)))
    ]
    return write_synthetic_samples(
        store_dir,
        changed,
        num_candidates=spec.num_candidates,
        scene_labels=spec.scene_labels,
        rows_per_shard=spec.rows_per_shard,
        replace=replace,
    )
