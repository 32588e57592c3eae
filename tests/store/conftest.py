"""Fixtures for store tests: small real stores written by the writer into temporary directories."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticStoreRecord, SyntheticStoreSpec, write_synthetic_store


@pytest.fixture(scope="session")
def _pristine_store(tmp_path_factory: pytest.TempPathFactory) -> SyntheticStoreRecord:
    return write_synthetic_store(
        tmp_path_factory.mktemp("pristine") / "store", SyntheticStoreSpec(seed=7)
    )


@pytest.fixture
def small_store(_pristine_store: SyntheticStoreRecord, tmp_path: Path) -> SyntheticStoreRecord:
    """A private copy of a labelled synthetic store: 24 samples, 3 shards of 8, every block family.

    Written once per session by the real writer and copied, so tests may damage their copy.
    """
    target = tmp_path / "store"
    shutil.copytree(_pristine_store.store_dir, target)
    return dataclasses.replace(_pristine_store, config=VinOfflineStoreConfig(store_dir=target))
