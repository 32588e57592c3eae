"""The demo's data: a synthetic VIN offline store and its raw tar shards, made once.

``ensure_demo_data()`` generates them into a cache directory the first time (seeded, so
every machine gets the same store) and reuses them afterwards. A ``demo-data.json`` stamp
records the spec that produced them; a changed spec regenerates them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticRawSpec, SyntheticStoreSpec, write_synthetic_dataset

__all__ = ["DEMO_RAW_SPEC", "DEMO_STORE_SPEC", "DemoData", "default_demo_dir", "ensure_demo_data"]

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
        "version": 1,
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
    if current != expected or not (data_dir / "store" / "manifest.json").exists():
        if data_dir.exists():
            shutil.rmtree(data_dir)
        data_dir.mkdir(parents=True)
        write_synthetic_dataset(data_dir, DEMO_STORE_SPEC, DEMO_RAW_SPEC)  # store/ and raw/
        stamp.write_text(json.dumps(expected, indent=2))
    return DemoData(root=base, store=config)
