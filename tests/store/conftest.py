"""Fixtures for store tests: small real stores written by the writer into temporary directories.

The folders mirror ``src/vinlens/store``'s packages (``format/``, ``reader/``, ``access/``,
``compare/``, ``diagnostics/``; raw tar coverage is ``raw_coverage/``, because a
``coverage`` directory on ``sys.path`` would shadow coverage.py for numba). Tests of the
top-level modules (writer, dataset, synthetic, errors) and of every engine at once stay
here, beside the helpers every folder imports (``s3_server``, ``midscan``,
``malformed_stores``: this directory is on ``sys.path`` through this conftest).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from s3_server import S3Dataset, S3Server

from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreRecord,
    SyntheticStoreSpec,
    write_synthetic_dataset,
    write_synthetic_store,
)


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


# --------------------------------------------------------------------------------------
# A real S3-compatible server (moto in server mode), one per test session
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_dataset(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> S3Dataset:
    local = write_synthetic_dataset(
        tmp_path_factory.mktemp("s3-dataset"), SyntheticStoreSpec(seed=11), SyntheticRawSpec()
    )
    store_url = s3_server.upload(local.store.store_dir, "dataset/store")
    raw_url = s3_server.upload(local.raw.raw_dir, "dataset/raw")
    remote = VinOfflineStoreConfig(
        store_dir=store_url, raw_dataset_dir=raw_url, storage_options=s3_server.storage_options
    )
    return S3Dataset(local=local, remote=remote, server=s3_server)
