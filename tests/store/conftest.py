"""Fixtures for store tests: small real stores written by the writer into temporary directories.

The folders mirror ``src/vinlens/store``'s rooms (``format/``, ``reader/``, ``access/``,
``compare/``, ``diagnostics/``; raw tar coverage is ``raw_coverage/``, because a
``coverage`` directory on ``sys.path`` would shadow coverage.py for numba). Tests of the
top-level modules (writer, dataset, synthetic, errors) and of every engine at once stay
here, beside the helpers every folder imports (``s3_server``, ``midscan``,
``malformed_stores``: this directory is on ``sys.path`` through this conftest).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Dataset, S3Server, s3_filesystem

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

_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "vinlens-test",
    "AWS_SECRET_ACCESS_KEY": "vinlens-test",
    "AWS_SESSION_TOKEN": "vinlens-test",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No credential lookups on the network (instance metadata) from tests.
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 (a free port), with fake credentials in the environment.

    The credentials exist only while this fixture is active (restored at session end); the
    endpoint reaches fsspec through ``storage_options["client_kwargs"]``, as users pass it.
    """
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO; tests that count requests add their own handler.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in _FAKE_AWS_ENV.items():
            patch.setenv(key, value)
        server.start()
        try:
            host, port = server.get_host_and_port()
            record = S3Server(endpoint_url=f"http://{host}:{port}", bucket="vinlens-test")
            s3_filesystem(record).mkdir(record.bucket)
            yield record
        finally:
            server.stop()


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
