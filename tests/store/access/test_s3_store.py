"""Stores and raw tars on object storage: a real S3-compatible server (moto) in the suite.

Everything written locally by the real writer, uploaded, and read back through ``s3://``
must give what the local copy gives: reader, dataset, statistics and coverage.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3_server import S3Dataset, S3Server, s3_filesystem

from vinlens.store.access import FsspecStoreAccess, StoreAccessError, open_store_access
from vinlens.store.coverage import _rawscan as coverage_module
from vinlens.store.coverage import clear_coverage_cache, collect_vin_offline_dataset_coverage
from vinlens.store.dataset import VinOfflineDataset
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.format import StoreReplacedError, VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader, capture_store_generation
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

pytestmark = pytest.mark.timeout(180)


def _same_sample(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if hasattr(x, "numpy"):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        elif isinstance(x, dict):
            assert x.keys() == y.keys()
            for key in x:
                np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]))
        else:
            assert x == y, f.name


def test_config_keeps_urls_and_local_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = VinOfflineStoreConfig(store_dir="s3://bucket/prefix/store/", raw_dataset_dir="gs://b/raw")
    assert url.store_dir == "s3://bucket/prefix/store"
    assert url.raw_dataset_dir == "gs://b/raw"
    monkeypatch.setenv("HOME", str(tmp_path))
    local = VinOfflineStoreConfig(store_dir="~/store")
    assert local.store_dir == tmp_path / "store" and isinstance(local.store_dir, Path)
    as_file = VinOfflineStoreConfig(store_dir=f"file://{tmp_path}/store")
    assert as_file.store_dir == tmp_path / "store"
    with pytest.raises(ValueError, match="looks like a URL folded by pathlib"):
        VinOfflineStoreConfig(store_dir=Path("s3://bucket/store"))


def test_memory_and_file_urls_read_like_local(tmp_path: Path) -> None:
    import fsspec

    record = write_synthetic_store(tmp_path / "store", SyntheticStoreSpec(seed=3))
    fs = fsspec.filesystem("memory")
    fs.put(str(record.store_dir), "/vinlens-test-mem", recursive=True)
    try:
        for location in ("memory://vinlens-test-mem", f"file://{record.store_dir}"):
            with (
                VinOfflineStoreReader(location) as remote,
                VinOfflineStoreReader(record.config) as local,
            ):
                assert remote.manifest == local.manifest and remote.samples == local.samples
                for i in range(remote.num_samples):
                    _same_sample(remote.read_sample(i), local.read_sample(i))
                remote.check_generation()
    finally:
        fs.rm("/vinlens-test-mem", recursive=True)


def test_reader_over_s3_matches_local(s3_dataset: S3Dataset) -> None:
    with (
        VinOfflineStoreReader(s3_dataset.remote) as remote,
        VinOfflineStoreReader(s3_dataset.local.config) as local,
    ):
        assert remote.store_dir == s3_dataset.remote.store_dir
        assert remote.manifest == local.manifest
        assert remote.samples == local.samples
        for i in range(remote.num_samples):
            _same_sample(remote.read_sample(i), local.read_sample(i))
        for shard in local.manifest.shards:
            for block in shard.blocks:
                if block.dtype is not None:
                    np.testing.assert_array_equal(
                        remote.zarr_array(shard.shard_id, block.name)[:],
                        local.read_rows(shard.shard_id, block.name, 0, shard.num_rows),
                    )
        generation = remote.generation
        # An object store's identity: ETag, size and last-modified of the objects.
        assert generation.manifest.etag and generation.sample_index.etag
        assert generation.manifest_sha256 == local.generation.manifest_sha256
        assert capture_store_generation(s3_dataset.remote) == generation


def test_dataset_over_s3_matches_local_and_pickles(s3_dataset: S3Dataset) -> None:
    remote = VinOfflineDataset(s3_dataset.remote, split="train")
    local = VinOfflineDataset(s3_dataset.local.config, split="train")
    assert len(remote) == len(local) > 0
    clone = pickle.loads(pickle.dumps(remote))
    for i in range(len(local)):
        _same_sample(remote[i], local[i])
        _same_sample(clone[i], local[i])
    batch = VinOfflineDataset.collate([remote[0], remote[1]])
    assert batch.shapes() == VinOfflineDataset.collate([local[0], local[1]]).shapes()


def test_stats_over_s3_equal_local(s3_dataset: S3Dataset) -> None:
    for max_samples in (None, 5):
        remote = collect_vin_offline_dataset_stats(s3_dataset.remote, max_samples=max_samples)
        local = collect_vin_offline_dataset_stats(s3_dataset.local.config, max_samples=max_samples)
        assert remote.store_dir == s3_dataset.remote.store_dir
        assert (
            dataclasses.replace(remote, store_dir=local.store_dir, generation=local.generation)
            == local
        )


def _coverage_without_locations(record: Any) -> Any:
    return dataclasses.replace(record, store_dir="", raw_dataset_dir="")


def test_coverage_over_s3_equals_local(s3_dataset: S3Dataset) -> None:
    clear_coverage_cache()
    local = collect_vin_offline_dataset_coverage(s3_dataset.local.config)
    remote = collect_vin_offline_dataset_coverage(s3_dataset.remote)
    assert remote.store_dir == s3_dataset.remote.store_dir
    assert remote.raw_dataset_dir == s3_dataset.remote.raw_dataset_dir
    assert _coverage_without_locations(remote) == _coverage_without_locations(local)
    assert local.tar_shards_scanned == 3 and local.covered_snippets > 0
    clear_coverage_cache()
    with ThreadPoolExecutor(max_workers=3) as pool:
        threaded = collect_vin_offline_dataset_coverage(s3_dataset.remote, executor=pool)
    assert threaded == remote


def test_coverage_caches_tar_partials_by_url_size_and_etag(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vinlens.store.synthetic import write_synthetic_dataset

    local = write_synthetic_dataset(tmp_path / "data")
    store_url = s3_server.upload(local.store.store_dir, "cache/store")
    raw_url = s3_server.upload(local.raw.raw_dir, "cache/raw")
    config = VinOfflineStoreConfig(
        store_dir=store_url, raw_dataset_dir=raw_url, storage_options=s3_server.storage_options
    )
    scanned: list[str] = []
    real_scan = coverage_module._scan_tar

    def counting_scan(task: Any) -> Any:
        scanned.append(task.rel)
        return real_scan(task)

    monkeypatch.setattr(coverage_module, "_scan_tar", counting_scan)
    first = collect_vin_offline_dataset_coverage(config)
    assert scanned == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    scanned.clear()
    assert collect_vin_offline_dataset_coverage(config) == first
    assert scanned == []
    # A rewritten tar (same members, one more padding block) is another object: only it
    # is scanned again.
    fs = s3_filesystem(s3_server)
    tar = local.raw.tar_paths[1]
    fs.pipe_file(f"{s3_server.bucket}/cache/raw/{tar.name}", tar.read_bytes() + bytes(512))
    assert collect_vin_offline_dataset_coverage(config) == first
    assert scanned == ["shard-000001.tar"]


def test_manifest_overwritten_mid_read_is_detected(s3_server: S3Server, tmp_path: Path) -> None:
    from vinlens.store.synthetic import write_synthetic_dataset

    local = write_synthetic_dataset(tmp_path / "data")
    store_url = s3_server.upload(local.store.store_dir, "replaced/store")
    raw_url = s3_server.upload(local.raw.raw_dir, "replaced/raw")
    config = VinOfflineStoreConfig(
        store_dir=store_url, raw_dataset_dir=raw_url, storage_options=s3_server.storage_options
    )
    fs = s3_filesystem(s3_server)
    key = f"{s3_server.bucket}/replaced/store/manifest.json"
    original = fs.cat_file(key)
    # Same content, another object: a new ETag and a new SHA-256 of the bytes.
    rewritten = json.dumps(json.loads(original), indent=1).encode()

    with VinOfflineStoreReader(config) as reader:
        reader.read_sample(0)
        fs.pipe_file(key, rewritten)
        with pytest.raises(StoreReplacedError, match=r"s3://vinlens-test/replaced/store"):
            reader.check_generation()
    fs.pipe_file(key, original)

    def overwrite_midway(done: int, total: int) -> None:
        if done == 1:
            fs.pipe_file(key, rewritten)

    clear_coverage_cache()
    with pytest.raises(StoreReplacedError, match="replaced"):
        collect_vin_offline_dataset_coverage(config, progress_cb=overwrite_midway)


# --------------------------------------------------------------------------------------
# Bad input: every failure names the URL, in bounded time
# --------------------------------------------------------------------------------------


def test_unknown_protocol_names_the_url() -> None:
    with pytest.raises(ValueError, match=r"nosuchproto://bucket/store: unknown protocol"):
        VinOfflineStoreReader("nosuchproto://bucket/store")


@pytest.mark.timeout(60)
def test_unreachable_endpoint_fails_fast_naming_the_url() -> None:
    config = VinOfflineStoreConfig(
        store_dir="s3://vinlens-test/store",
        storage_options={"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}},
    )
    start = time.monotonic()
    with pytest.raises(StoreAccessError, match=r"s3://vinlens-test/store"):
        VinOfflineStoreReader(config)
    assert time.monotonic() - start < 50  # bounded by the timeouts, far from a hang


@pytest.mark.timeout(60)
def test_missing_credentials_name_the_url(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    options = {**s3_server.storage_options, "skip_instance_cache": True}
    with pytest.raises(StoreAccessError, match=r"s3://vinlens-test/nocreds/store"):
        VinOfflineStoreReader(
            VinOfflineStoreConfig(store_dir=s3_server.url("nocreds/store"), storage_options=options)
        )


def test_missing_s3_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    registry = importlib.import_module("fsspec.registry")
    monkeypatch.delitem(registry._registry, "s3", raising=False)
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(ImportError, match=r"s3://b/store.*pip install 'vinlens\[s3\]'"):
        open_store_access("s3://b/store")


def test_fsspec_access_pickles_as_location_and_options(s3_dataset: S3Dataset) -> None:
    access = open_store_access(str(s3_dataset.remote.store_dir), s3_dataset.remote.storage_options)
    assert isinstance(access, FsspecStoreAccess)
    clone = pickle.loads(pickle.dumps(access))
    assert clone.root == access.root
    assert clone.read_bytes("manifest.json") == access.read_bytes("manifest.json")
    assert access.read_range("manifest.json", 10**9, 10) == b""
    with pytest.raises(FileNotFoundError, match="s3://vinlens-test/dataset/store/nope"):
        access.stat("nope")


@pytest.mark.timeout(300)
def test_dask_local_cluster_coverage_and_stats_equal_local(s3_dataset: S3Dataset) -> None:
    distributed = pytest.importorskip("distributed")
    local = collect_vin_offline_dataset_coverage(s3_dataset.local.config)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        executor = client.get_executor()
        for config in (s3_dataset.local.config, s3_dataset.remote):
            clear_coverage_cache()
            done: list[int] = []

            def progress(d: int, t: int, done: list[int] = done) -> None:
                done.append(d)

            record = collect_vin_offline_dataset_coverage(
                config, executor=executor, progress_cb=progress
            )
            assert _coverage_without_locations(record) == _coverage_without_locations(local)
            assert done[0] == 0 and done[-1] == record.tar_shards_scanned
        local_stats = collect_vin_offline_dataset_stats(s3_dataset.local.config, max_samples=None)
        remote_stats = collect_vin_offline_dataset_stats(
            s3_dataset.remote, max_samples=None, executor=executor
        )
        assert (
            dataclasses.replace(
                remote_stats, store_dir=local_stats.store_dir, generation=local_stats.generation
            )
            == local_stats
        )


@pytest.mark.timeout(60)
def test_endpoint_that_never_answers_times_out_naming_the_url() -> None:
    import socket

    # A listening socket that is never served: connects succeed, reads wait for ever.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        config = VinOfflineStoreConfig(
            store_dir="s3://vinlens-test/silent",
            storage_options={
                "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
                # Merged over the defaults key by key (retries stay bounded).
                "config_kwargs": {"read_timeout": 1, "connect_timeout": 1},
                "skip_instance_cache": True,
            },
        )
        start = time.monotonic()
        with pytest.raises(StoreAccessError, match=r"s3://vinlens-test/silent"):
            VinOfflineStoreReader(config)
        assert time.monotonic() - start < 30


def test_default_s3_options_survive_use(s3_dataset: S3Dataset) -> None:
    from vinlens.store.access import DEFAULT_S3_OPTIONS

    before = json.dumps(DEFAULT_S3_OPTIONS, sort_keys=True)
    options = dict(s3_dataset.remote.storage_options or {})
    options["skip_instance_cache"] = True
    access = open_store_access(str(s3_dataset.remote.store_dir), options)
    access.read_bytes("manifest.json")
    access.zarr_store("shards")
    # botocore rewrites the retries dict it gets; ours must stay as documented.
    assert json.dumps(DEFAULT_S3_OPTIONS, sort_keys=True) == before
