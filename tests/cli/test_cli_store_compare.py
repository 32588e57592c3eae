"""``vinlens store compare A B`` through the real command line entry."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from vinlens.cli import main
from vinlens.store.compare import DRIFT_METRICS
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_samples,
)

SPEC = SyntheticStoreSpec(num_scenes=3, snippets_per_scene=3, seed=5)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli-compare")
    samples = make_synthetic_samples(SPEC)
    shifted = []
    for s in samples:
        if s.scene_id == "scene_000003":
            continue  # a removed scene
        assert s.rri is not None
        shifted.append(dataclasses.replace(s, rri=(s.rri + np.float32(0.3)).astype(np.float32)))
    kwargs = {"num_candidates": SPEC.num_candidates, "rows_per_shard": SPEC.rows_per_shard}
    return (
        write_synthetic_samples(root / "a", samples, **kwargs),  # type: ignore[arg-type]
        write_synthetic_samples(root / "b", shifted, **kwargs),  # type: ignore[arg-type]
    )


def test_compare_prints_fields_by_drift_and_set_differences(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--all"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines.index("fields by js_distance (largest first)")
    assert lines[header + 1].split()[:3] == ["field", "count", "A"]
    assert lines[header + 3].startswith("rri ")  # the shifted field on top
    assert "scenes only in A   scene_000003" in out
    assert "samples only in B  0" in out
    assert "sample keys only in A" in out
    assert "(all)" in out

    assert main(["store", "compare", str(a), str(b), "--metric", "wasserstein"]) == 0
    out = capsys.readouterr().out
    assert "fields by wasserstein" in out


def test_compare_json_and_workers_agree(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--all", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["scenes_only_in_a"] == ["scene_000003"]
    fields = {f["name"]: f for f in record["fields"]}
    assert fields["rri"]["wasserstein"] == pytest.approx(0.3, abs=0.02)
    assert main(["store", "compare", str(a), str(b), "--all", "--json", "--workers", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == record


def test_compare_errors(
    stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = stores
    with pytest.raises(SystemExit) as exc:
        main(["store", "compare", str(a), str(a), "--workers", "2", "--scheduler", "tcp://x:1"])
    assert exc.value.code == 2
    capsys.readouterr()
    code = main(["store", "compare", str(a), str(tmp_path / "missing")])
    assert code != 0
    assert str(tmp_path / "missing") in capsys.readouterr().err


@pytest.mark.parametrize("metric", DRIFT_METRICS)
def test_compare_accepts_every_ranking_metric(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str], metric: str
) -> None:
    """Every metric the engine ranks by sorts the table, largest first, its column shown."""
    from vinlens.cli.store_compare import METRIC_HEADERS
    from vinlens.store.compare import compare_vin_offline_stores

    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--all", "--metric", metric]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(f"fields by {metric} (largest first)")
    columns = lines[header + 1].split("  ")
    assert [c.strip() for c in columns if c.strip()][-5:] == [
        *(METRIC_HEADERS[m] for m in DRIFT_METRICS),
        "exact",
    ]
    printed = []
    for line in lines[header + 3 :]:
        if not line.strip():
            break
        printed.append(line.split()[0])
    ranked = compare_vin_offline_stores(a, b, max_samples=None).most_drifted(metric, k=1000)
    assert printed == [d.name for d in ranked]


def test_compare_unknown_metric_is_one_line_naming_the_choices(
    stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--metric", "mean"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "vinlens: error: --metric: unknown drift metric 'mean'; choose one of "
        + ", ".join(DRIFT_METRICS)
        + "\n"
    )
    # Checked before any store is opened (a missing store is not what it reports).
    missing = str(tmp_path / "missing")
    assert main(["store", "compare", missing, missing, "--metric", "KS", "--json"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'KS'" in err and missing not in err


def test_equal_numbers_compare_equal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """All +0.0 against all -0.0 (and a float16 field holding both zeros) is no drift."""
    from vinlens.store.compare import compare_vin_offline_stores
    from vinlens.store.compare._binning import FieldHistogram, drift_metrics
    from vinlens.store.format import VinOfflineStoreConfig

    samples = make_synthetic_samples(SPEC)
    kwargs = {"num_candidates": SPEC.num_candidates, "rows_per_shard": SPEC.rows_per_shard}
    sides = []
    for name, zero in (("pos", 0.0), ("neg", -0.0)):
        rows = [
            dataclasses.replace(s, rri=np.full_like(s.rri, zero, dtype=np.float32))
            for s in samples
            if s.rri is not None
        ]
        sides.append(write_synthetic_samples(tmp_path / name, rows, **kwargs))  # type: ignore[arg-type]
    result = compare_vin_offline_stores(
        VinOfflineStoreConfig(store_dir=str(sides[0])),
        VinOfflineStoreConfig(store_dir=str(sides[1])),
        max_samples=None,
    )
    rri = next(f for f in result.fields if f.name == "rri")
    assert (rri.ks_statistic, rri.js_distance, rri.wasserstein) == (0.0, 0.0, 0.0)
    assert sum(rri.histogram_a) == sum(rri.histogram_b) == rri.count_a
    assert main(["store", "compare", str(sides[0]), str(sides[1]), "--all", "--json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert fields["rri"]["ks_statistic"] == 0.0 and fields["rri"]["js_distance"] == 0.0

    a, b = FieldHistogram.for_dtype("float16"), FieldHistogram.for_dtype("float16")
    values = np.array([0.0, -0.0, 1.0, 2.0] * 40, dtype=np.float16)
    a.update(values)
    b.update(np.abs(values))
    nan_payload = np.array([0x7E01, 0x7C01], dtype=np.uint16).view(np.float16)
    assert a.update(nan_payload) == b.update(np.full(2, np.nan, np.float16)) == 2
    metrics = drift_metrics(a.summary(), b.summary())
    assert (metrics.ks_statistic, metrics.js_distance, metrics.psi) == (0.0, 0.0, 0.0)
    assert sum(metrics.display_a) == 160
