"""``vinlens store stats`` and ``vinlens store coverage``: tables, JSON, progress, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vinlens.cli import main
from vinlens.cli.table import to_json_value
from vinlens.store.coverage import collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats, dashboard_problems
from vinlens.store.synthetic import SyntheticDatasetRecord, write_synthetic_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDatasetRecord:
    return write_synthetic_dataset(tmp_path_factory.mktemp("cli"))


def test_stats_json_is_the_record(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    assert main(["store", "stats", store, "--max-samples", "5", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    record = collect_vin_offline_dataset_stats(store, max_samples=5)
    problems = data.pop("problems")
    assert data == json.loads(json.dumps(to_json_value(record)))
    assert problems == dashboard_problems(record)
    assert data["sampled_samples"] == 5 and err == ""

    assert main(["store", "stats", store, "--all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_samples"] == data["num_samples"] == dataset.store.num_samples
    assert data["max_samples"] is None


def test_stats_table(dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "stats", str(dataset.store.store_dir)]) == 0
    out = capsys.readouterr().out
    stats = collect_vin_offline_dataset_stats(dataset.store.store_dir)
    assert f"samples        {stats.num_samples}" in out
    assert "valid candidates / sample" in out and "RRI (valid, finite)" in out
    assert "voxel_features" in out and "8x4x4" in out
    assert "batch preview (VinOracleBatch)" in out
    assert "samples without candidate ids (unpaired)" in out
    assert "integrity      ok" in out
    assert f"rows           all {stats.num_samples} rows scanned" in out


def test_stats_table_says_which_rows_a_sample_scan_read(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "stats", str(dataset.store.store_dir), "--max-samples", "5"]) == 0
    out = capsys.readouterr().out
    total = collect_vin_offline_dataset_stats(dataset.store.store_dir).num_samples
    assert f"rows           5 of {total} rows sampled" in out


def test_stats_options_are_exclusive_and_checked(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    with pytest.raises(SystemExit) as info:
        main(["store", "stats", store, "--all", "--max-samples", "3"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main(["store", "stats", store, "--max-samples", "-1"])
    assert "non-negative integer" in capsys.readouterr().err


def test_stats_error_names_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "stats", str(tmp_path / "nowhere")]) == 1
    assert str(tmp_path / "nowhere") in capsys.readouterr().err


def test_coverage_json_table_and_progress(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store, raw = str(dataset.store.store_dir), str(dataset.raw.raw_dir)
    assert main(["store", "coverage", store, "--raw", raw, "--json", "--progress"]) == 0
    out, err = capsys.readouterr()
    expected = to_json_value(collect_vin_offline_dataset_coverage(dataset.config))
    assert json.loads(out) == json.loads(json.dumps(expected))
    assert f"{len(dataset.raw.tar_paths)}/{len(dataset.raw.tar_paths)} tars" in err

    assert main(["store", "coverage", store, "--raw", raw, "--max-tars", "1"]) == 0
    out, err = capsys.readouterr()
    assert f"tars scanned         1 of {len(dataset.raw.tar_paths)}" in out
    assert "per scene" in out and "scene_000001" in out
    assert "README_0.txt" in out
    assert err == ""  # no terminal, no --progress: no bar


def test_coverage_requires_raw(dataset: SyntheticDatasetRecord) -> None:
    with pytest.raises(SystemExit):
        main(["store", "coverage", str(dataset.store.store_dir)])


def test_json_spells_out_non_finite_numbers() -> None:
    assert to_json_value({"a": (float("nan"), float("inf"), -float("inf"), 1.5)}) == {
        "a": ["NaN", "Infinity", "-Infinity", 1.5]
    }


def test_stats_help_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["store", "stats", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Scan a store and print its statistics" in text
    assert "ranked as the store dashboard ranks them" in text and "--all reads every row" in text
    assert "seed" not in text.lower()


def test_stats_distribution_numbers_are_right_aligned(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "stats", str(dataset.store.store_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("distributions") + 1
    header = lines[at]
    rows = []
    for line in lines[at + 2 :]:
        if not line:
            break
        rows.append(line)
    for column in ("count", "min", "mean", "max"):
        end = header.index(column) + len(column)
        for row in rows:
            assert row[end - 1] != " " and (len(row) == end or row[end] == " "), (column, row)


def test_stats_lists_the_problems_the_dashboard_shows(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    assert main(["store", "stats", store, "--all"]) == 0
    out = capsys.readouterr().out
    problems = dashboard_problems(collect_vin_offline_dataset_stats(store, max_samples=None))
    assert problems, "the synthetic store has at least the unpaired-samples notice"
    counts = {p["severity"] for p in problems}
    overview = next(line for line in out.splitlines() if line.startswith("problems  "))
    for severity in counts:
        assert severity in overview
    table = out.split("problems (most severe first)\n", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]
    assert [row.split()[0] for row in rows] == [p["severity"] for p in problems]
    for row, problem in zip(rows, problems, strict=True):
        assert problem["title"] in row
