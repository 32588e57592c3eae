"""Store compare on stores the tests write with planted shifts, against scipy and itself."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from s3_server import S3Server
from scipy import stats as scipy_stats

from vinlens.store import (
    FieldDrift,
    StoreComparison,
    VinOfflineStoreConfig,
    compare_vin_offline_stores,
)
from vinlens.store.compare import FLOAT32_RELATIVE_RESOLUTION, PSI_EPSILON
from vinlens.store.diagnostics import VinOfflineStoreReplacedError, dask_executor
from vinlens.store.format import VinOfflineSample
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_samples,
)

SPEC = SyntheticStoreSpec(num_scenes=4, snippets_per_scene=4, samples_per_snippet=3, seed=7)
METRICS = ("psi", "js_distance", "wasserstein", "ks_statistic")


def _write(path: Path, samples: list[VinOfflineSample], spec: SyntheticStoreSpec = SPEC) -> Path:
    return write_synthetic_samples(
        path,
        samples,
        num_candidates=spec.num_candidates,
        scene_labels=spec.scene_labels,
        rows_per_shard=spec.rows_per_shard,
    )


def _offset_rri(sample: VinOfflineSample, offset: float) -> VinOfflineSample:
    assert sample.rri is not None
    return dataclasses.replace(sample, rri=(sample.rri + np.float32(offset)).astype(np.float32))


def _scale_voxels(sample: VinOfflineSample, factor: float) -> VinOfflineSample:
    backbone = dict(sample.backbone)
    backbone["voxel_features"] = (backbone["voxel_features"] * factor).astype(np.float16)
    return dataclasses.replace(sample, backbone=backbone)


def tree_digest(root: Path) -> str:
    """Bytes, sizes and mtimes of every file and directory under ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.stat()
        h.update(f"{path.relative_to(root)}|{st.st_size}|{st.st_mtime_ns}|".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def samples() -> list[VinOfflineSample]:
    return make_synthetic_samples(SPEC)


@pytest.fixture(scope="module")
def store_a(tmp_path_factory: pytest.TempPathFactory, samples: list[VinOfflineSample]) -> Path:
    return _write(tmp_path_factory.mktemp("cmp") / "a", samples)


@pytest.fixture(scope="module")
def store_rri(tmp_path_factory: pytest.TempPathFactory, samples: list[VinOfflineSample]) -> Path:
    return _write(tmp_path_factory.mktemp("cmp") / "rri", [_offset_rri(s, 0.25) for s in samples])


@pytest.fixture(scope="module")
def store_voxel(tmp_path_factory: pytest.TempPathFactory, samples: list[VinOfflineSample]) -> Path:
    return _write(
        tmp_path_factory.mktemp("cmp") / "voxel", [_scale_voxels(s, 1.5) for s in samples]
    )


@pytest.fixture(scope="module")
def store_sets(tmp_path_factory: pytest.TempPathFactory, samples: list[VinOfflineSample]) -> Path:
    """Scene 2 removed, three extra samples added to scene 1."""
    kept = [s for s in samples if s.scene_id != "scene_000002"]
    extra = [
        dataclasses.replace(samples[i], sample_key=f"scene_000001/extra/{i:03d}", split="extra")
        for i in range(3)
    ]
    return _write(tmp_path_factory.mktemp("cmp") / "sets", kept + extra)


def _assert_all_zero(result: StoreComparison) -> None:
    assert result.fields
    for drift in result.fields:
        for metric in METRICS:
            assert getattr(drift, metric) == 0.0, (drift.name, metric)
        assert drift.count_a == drift.count_b > 0
        assert drift.mean_a == drift.mean_b
        assert drift.histogram_a == drift.histogram_b


def test_identical_stores_give_exact_zeros(
    tmp_path: Path, store_a: Path, samples: list[VinOfflineSample]
) -> None:
    copy = _write(tmp_path / "copy", samples)
    for other in (store_a, copy):
        result = compare_vin_offline_stores(store_a, other, max_samples=None)
        _assert_all_zero(result)
        assert result.samples_only_in_a == result.samples_only_in_b == 0
        assert result.scenes_only_in_a == result.scenes_only_in_b == ()
        assert result.split_counts_a == result.split_counts_b
        assert result.problems_a == result.problems_b == ()


def test_field_names_and_camera_rows(store_a: Path) -> None:
    result = compare_vin_offline_stores(store_a, store_a, max_samples=None)
    names = [f.name for f in result.fields]
    assert names == sorted(names)
    expected = {
        "rri",
        "rri_components.visibility",
        "rri_components.novelty",
        "candidate_poses",
        "backbone.voxel_features",
        "backbone.global_features",
        "valid_candidate_count",
        "vin_point_count",
    } | {f"backbone.voxel_features[{i}]" for i in range(8)}  # (8, 4, 4): 8 channels
    assert set(names) == expected
    whole = result.field("backbone.voxel_features")
    assert whole.count_a == sum(
        result.field(f"backbone.voxel_features[{i}]").count_a for i in range(8)
    )
    assert whole.exact and not result.field("rri").exact
    assert result.field("vin_point_count").count_a == SPEC.num_samples
    assert result.psi_epsilon == PSI_EPSILON
    assert result.float32_relative_resolution == FLOAT32_RELATIVE_RESOLUTION
    with pytest.raises(KeyError, match=r"no field 'nope'.*rri"):
        result.field("nope")


def _rri_values(samples: list[VinOfflineSample], offset: float = 0.0) -> np.ndarray:
    out = []
    for s in samples:
        assert s.rri is not None and s.candidate_valid is not None
        rri = (s.rri + np.float32(offset)).astype(np.float32)
        out.append(rri[s.candidate_valid & np.isfinite(rri)])
    return np.concatenate(out).astype(np.float64)


def _bin_midpoints(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    lo = bits.view(np.float32).astype(np.float64)
    hi = (bits | np.uint32(0xFFFF)).view(np.float32).astype(np.float64)
    return (lo + hi) / 2


def test_offset_field_ranks_first_and_agrees_with_scipy(
    store_a: Path, store_rri: Path, samples: list[VinOfflineSample]
) -> None:
    result = compare_vin_offline_stores(store_a, store_rri, max_samples=None)
    for metric in METRICS:
        top = result.most_drifted(metric, k=3)
        assert top[0].name == "rri", metric
        assert top[1].metric(metric) == 0.0
    rri = result.field("rri")
    a, b = _rri_values(samples), _rri_values(samples, 0.25)
    assert (rri.count_a, rri.count_b) == (a.size, b.size)
    assert rri.mean_a == pytest.approx(a.mean(), rel=1e-12)
    assert rri.mean_b - rri.mean_a == pytest.approx(0.25, abs=1e-6)
    assert rri.std_a == pytest.approx(a.std(), rel=1e-9)
    # On the values the bins stand for, the metrics are scipy's to rounding ...
    ma, mb = _bin_midpoints(a), _bin_midpoints(b)
    assert rri.ks_statistic == pytest.approx(scipy_stats.ks_2samp(ma, mb).statistic, abs=1e-12)
    assert rri.wasserstein == pytest.approx(scipy_stats.wasserstein_distance(ma, mb), rel=1e-9)
    # ... and on the raw values within the stated resolution.
    bound = FLOAT32_RELATIVE_RESOLUTION * max(np.abs(a).max(), np.abs(b).max())
    assert abs(rri.wasserstein - scipy_stats.wasserstein_distance(a, b)) <= bound
    share = max(
        Counter(ma.tolist()).most_common(1)[0][1] / a.size,
        Counter(mb.tolist()).most_common(1)[0][1] / b.size,
    )
    assert abs(rri.ks_statistic - scipy_stats.ks_2samp(a, b).statistic) <= 2 * share
    assert rri.wasserstein == pytest.approx(0.25, abs=bound)
    assert rri.js_distance is not None and 0.0 < rri.js_distance <= 1.0
    assert rri.psi is not None and rri.psi > 0.25


def test_scaled_float16_field_is_exact_against_scipy(
    store_a: Path, store_voxel: Path, samples: list[VinOfflineSample]
) -> None:
    result = compare_vin_offline_stores(store_a, store_voxel, max_samples=None)
    for metric in ("wasserstein", "ks_statistic", "js_distance"):
        assert result.most_drifted(metric)[0].name.startswith("backbone.voxel_features"), metric
    drift = result.field("backbone.voxel_features")
    a = np.concatenate([s.backbone["voxel_features"].reshape(-1) for s in samples])
    b = np.concatenate(
        [_scale_voxels(s, 1.5).backbone["voxel_features"].reshape(-1) for s in samples]
    )
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert drift.exact
    assert drift.ks_statistic == pytest.approx(scipy_stats.ks_2samp(a64, b64).statistic, abs=1e-12)
    assert drift.wasserstein == pytest.approx(
        scipy_stats.wasserstein_distance(a64, b64), rel=1e-9, abs=1e-12
    )
    assert drift.mean_a == pytest.approx(a64.mean(), rel=1e-12, abs=1e-15)
    assert drift.std_b == pytest.approx(b64.std(), rel=1e-12)
    channel = result.field("backbone.voxel_features[3]")
    ca = np.concatenate([s.backbone["voxel_features"][3].reshape(-1) for s in samples])
    cb = (ca * 1.5).astype(np.float16)
    assert channel.wasserstein == pytest.approx(
        scipy_stats.wasserstein_distance(ca.astype(np.float64), cb.astype(np.float64)), rel=1e-9
    )
    # Fields that did not move stay at exactly 0.
    assert result.field("rri").ks_statistic == 0.0
    assert result.field("backbone.global_features").wasserstein == 0.0


def test_sample_and_scene_differences_are_exact(
    store_a: Path, store_sets: Path, samples: list[VinOfflineSample]
) -> None:
    result = compare_vin_offline_stores(store_a, store_sets, max_samples=None)
    removed = sorted(s.sample_key for s in samples if s.scene_id == "scene_000002")
    assert result.scenes_only_in_a == ("scene_000002",)
    assert result.scenes_only_in_b == ()
    assert result.samples_only_in_a == len(removed)
    assert list(result.sample_keys_only_in_a) == removed
    assert result.samples_only_in_b == 3
    assert result.sample_keys_only_in_b == tuple(f"scene_000001/extra/{i:03d}" for i in range(3))
    assert result.split_counts_a == dict(sorted(Counter(s.split for s in samples).items()))
    assert result.split_counts_b["extra"] == 3
    assert result.num_samples_b == len(samples) - len(removed) + 3
    assert result.field("vin_point_count").count_b == result.num_samples_b


def test_sampled_rows_and_bad_arguments(store_a: Path, store_rri: Path) -> None:
    result = compare_vin_offline_stores(store_a, store_rri, max_samples=10)
    assert result.sampled_samples_a == result.sampled_samples_b == 10
    assert result.field("vin_point_count").count_a == 10
    assert result.most_drifted(k=0) == ()
    assert len(result.most_drifted(k=100)) == len(result.fields)
    with pytest.raises(ValueError, match="metric must be one of"):
        result.most_drifted("mean")
    with pytest.raises(ValueError, match="k must be"):
        result.most_drifted(k=-1)
    with pytest.raises(ValueError, match="max_samples"):
        compare_vin_offline_stores(store_a, store_rri, max_samples=-1)
    with pytest.raises(TypeError, match="executor"):
        compare_vin_offline_stores(store_a, store_rri, executor="process")  # type: ignore[arg-type]


def test_progress_counts_rows_of_both_stores(store_a: Path, store_sets: Path) -> None:
    seen: list[tuple[int, int]] = []
    result = compare_vin_offline_stores(
        store_a, store_sets, max_samples=None, progress_cb=lambda d, t: seen.append((d, t))
    )
    total = result.num_samples_a + result.num_samples_b
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_process_pool_and_dask_equal_in_process(store_a: Path, store_sets: Path) -> None:
    distributed = pytest.importorskip("distributed")
    local = compare_vin_offline_stores(store_a, store_sets, max_samples=None)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        assert (
            compare_vin_offline_stores(store_a, store_sets, max_samples=None, executor=pool)
            == local
        )
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        dask_executor(cluster.scheduler_address) as executor,
    ):
        remote = compare_vin_offline_stores(
            store_a, store_sets, max_samples=None, executor=executor
        )
    assert remote == local


def test_one_store_on_s3_one_local_both_untouched(
    s3_server: S3Server, store_a: Path, store_rri: Path
) -> None:
    url = s3_server.upload(store_rri, "compare/rri")
    remote = VinOfflineStoreConfig(store_dir=url, storage_options=s3_server.storage_options)
    before_a, before_b = tree_digest(store_a), tree_digest(store_rri)
    listing = sorted(s3_server_listing(s3_server, "compare/rri"))
    result = compare_vin_offline_stores(store_a, remote, max_samples=None)
    local = compare_vin_offline_stores(store_a, store_rri, max_samples=None)
    assert result.store_b == url
    assert result.fields == local.fields
    assert result.most_drifted()[0].name == "rri"
    assert tree_digest(store_a) == before_a and tree_digest(store_rri) == before_b
    assert sorted(s3_server_listing(s3_server, "compare/rri")) == listing


def s3_server_listing(server: S3Server, key: str) -> list[tuple[str, int, str]]:
    from s3_server import s3_filesystem

    fs = s3_filesystem(server)
    return [
        (path, int(info["size"]), str(info.get("ETag", "")))
        for path, info in fs.find(f"{server.bucket}/{key}", detail=True).items()
    ]


def test_store_replaced_during_the_compare_raises(
    tmp_path: Path, samples: list[VinOfflineSample], store_a: Path
) -> None:
    target = _write(tmp_path / "b", samples)

    def replace_once(done: int, total: int) -> None:
        if done and not (tmp_path / "replaced").exists():
            (tmp_path / "replaced").touch()
            write_synthetic_samples(
                target,
                samples[:5],
                num_candidates=SPEC.num_candidates,
                rows_per_shard=SPEC.rows_per_shard,
                replace=True,
            )

    with pytest.raises(VinOfflineStoreReplacedError, match="replaced or changed"):
        compare_vin_offline_stores(store_a, target, max_samples=None, progress_cb=replace_once)


def test_unlabelled_store_and_dtype_change(tmp_path: Path) -> None:
    spec = dataclasses.replace(SPEC, scene_labels=False)
    plain = make_synthetic_samples(spec)
    a = _write(tmp_path / "a", plain, spec)
    widened = []
    for s in plain:
        backbone = dict(s.backbone)
        backbone["voxel_features"] = backbone["voxel_features"].astype(np.float32)
        widened.append(dataclasses.replace(s, backbone=backbone))
    b = _write(tmp_path / "b", widened, spec)
    result = compare_vin_offline_stores(a, b, max_samples=None)
    names = {f.name for f in result.fields}
    assert "rri" not in names and "valid_candidate_count" not in names
    assert "candidate_poses" in names
    voxel = result.field("backbone.voxel_features")
    assert (voxel.dtype_a, voxel.dtype_b) == ("float16", "float32")
    # float16 values are float32 values: on the float32 bins the two are the same.
    assert voxel.ks_statistic == 0.0 and voxel.wasserstein == 0.0
    assert voxel.mean_a == voxel.mean_b


def test_field_only_in_one_store_has_no_metrics(
    tmp_path: Path, samples: list[VinOfflineSample]
) -> None:
    a = _write(tmp_path / "a", samples)
    dropped = [
        dataclasses.replace(s, backbone={"voxel_features": s.backbone["voxel_features"]})
        for s in samples
    ]
    b = _write(tmp_path / "b", dropped)
    result = compare_vin_offline_stores(a, b, max_samples=None)
    drift = result.field("backbone.global_features")
    assert isinstance(drift, FieldDrift)
    assert drift.count_b == 0 and drift.dtype_b is None and drift.mean_b is None
    assert all(getattr(drift, m) is None for m in METRICS)
    assert result.most_drifted("psi", k=len(result.fields))[-1].name == "backbone.global_features"


def test_nonfinite_values_are_problems_of_their_store(
    tmp_path: Path, samples: list[VinOfflineSample]
) -> None:
    bad = list(samples)
    pose = bad[0].candidate_poses
    assert pose is not None
    pose = pose.copy()
    pose[0, 0] = np.nan
    bad[0] = dataclasses.replace(bad[0], candidate_poses=pose)
    a = _write(tmp_path / "a", samples)
    b = _write(tmp_path / "b", bad)
    result = compare_vin_offline_stores(a, b, max_samples=None)
    assert result.problems_a == ()
    assert [(p.kind, p.block) for p in result.problems_b] == [
        ("NonFiniteValues", "candidate_poses")
    ]
    assert os.fspath(b) in (result.problems_b[0].path or "")


def test_cli_compares_a_local_store_with_one_on_s3(
    s3_server: S3Server, store_a: Path, store_rri: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from vinlens.cli import main

    url = s3_server.upload(store_rri, "compare/cli-rri")
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    argv = ["store", "compare", str(store_a), url, "--all", "--json"]
    assert main([*argv, "--storage-option", f"client_kwargs.endpoint_url={endpoint}"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["store_b"] == url
    local = compare_vin_offline_stores(store_a, store_rri, max_samples=None)
    ranked = sorted(record["fields"], key=lambda f: -(f["js_distance"] or 0))
    assert ranked[0]["name"] == "rri"
    assert {f["name"]: f["ks_statistic"] for f in record["fields"]} == {
        f.name: f.ks_statistic for f in local.fields
    }
