"""``vinlens store info|stats|coverage`` on URLs, with storage options, workers and a scheduler.

Parsing and the executor flags first; then the numbers, which must equal the in-process
numbers on worker processes, on a Dask cluster and over ``file://`` URLs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vinlens.cli import main
from vinlens.cli.store import open_executor, parse_storage_options
from vinlens.store.synthetic import SyntheticDatasetRecord, write_synthetic_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDatasetRecord:
    return write_synthetic_dataset(tmp_path_factory.mktemp("cli-scale"))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _without_locations(record: object) -> object:
    """The record with the store/raw locations dropped (a URL and a path name one store)."""
    assert isinstance(record, dict)
    return {
        k: v
        for k, v in record.items()
        if k not in {"store_dir", "raw_dataset_dir", "generation", "selection"}
    }


# --------------------------------------------------------------------------- parsing


def test_storage_options_parse_json_values_and_nest_dotted_keys() -> None:
    assert parse_storage_options([]) is None
    options = parse_storage_options(
        [
            ("anon", True),
            ("client_kwargs.endpoint_url", "http://127.0.0.1:9000"),
            ("client_kwargs.region_name", "eu-west-1"),
            ("default_block_size", 1024),
        ]
    )
    assert options == {
        "anon": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
        "default_block_size": 1024,
    }
    with pytest.raises(ValueError, match="a is already set"):
        parse_storage_options([("a", 1), ("a.b", 2)])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--storage-option", "novalue"], "expected KEY=VALUE"),
        (["--storage-option", "=x"], "expected KEY=VALUE"),
        (["--workers", "0"], "expected a positive integer"),
        (["--workers", "two"], "expected a positive integer"),
        (["--workers", "2", "--scheduler", "tcp://x:8786"], "not allowed with argument"),
    ],
)
def test_bad_flags_are_argument_errors(
    argv: list[str],
    message: str,
    dataset: SyntheticDatasetRecord,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for command in (["stats"], ["coverage", "--raw", str(dataset.raw.raw_dir)]):
        with pytest.raises(SystemExit) as info:
            main(["store", command[0], str(dataset.store.store_dir), *command[1:], *argv])
        assert info.value.code == 2
        assert message in capsys.readouterr().err


def test_scheduler_without_the_dask_extra_names_it(
    dataset: SyntheticDatasetRecord,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail
    store = str(dataset.store.store_dir)
    assert main(["store", "stats", store, "--scheduler", "tcp://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vinlens: error: ") and "pip install 'vinlens[dask]'" in err
    assert "\n" not in err


def test_open_executor_makes_the_executor_the_flags_ask_for() -> None:
    from concurrent.futures import ProcessPoolExecutor

    with open_executor(None, None) as executor:
        assert executor is None
    with open_executor(2, None) as executor:
        assert isinstance(executor, ProcessPoolExecutor)
        assert executor.submit(pow, 2, 10).result() == 1024
    with pytest.raises(ValueError, match="exclude each other"), open_executor(2, "tcp://x"):
        pass


# --------------------------------------------------------------------------- same numbers


def test_stats_on_workers_equal_stats_in_process(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    local = _json(capsys, ["store", "stats", store, "--all", "--json"])
    pooled = _json(capsys, ["store", "stats", store, "--all", "--json", "--workers", "2"])
    assert pooled == local


def test_coverage_on_workers_equals_coverage_in_process(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["store", "coverage", str(dataset.store.store_dir), "--raw", str(dataset.raw.raw_dir)]
    local = _json(capsys, [*argv, "--json"])
    pooled = _json(capsys, [*argv, "--json", "--workers", "2"])
    assert pooled == local


def test_file_urls_give_the_local_numbers(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Path(dataset.store.store_dir)
    raw = Path(dataset.raw.raw_dir)
    store_url, raw_url = store.as_uri(), raw.as_uri()

    assert _json(capsys, ["store", "info", store_url, "--json"]) == _json(
        capsys, ["store", "info", str(store), "--json"]
    )
    local = _json(capsys, ["store", "stats", str(store), "--json"])
    remote = _json(capsys, ["store", "stats", store_url, "--json"])
    assert _without_locations(remote) == _without_locations(local)

    local = _json(capsys, ["store", "coverage", str(store), "--raw", str(raw), "--json"])
    remote = _json(capsys, ["store", "coverage", store_url, "--raw", raw_url, "--json"])
    assert _without_locations(remote) == _without_locations(local)


def test_progress_bar_goes_to_stderr_only(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    assert main(["store", "stats", store, "--all", "--json", "--progress", "--workers", "2"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    total = dataset.store.num_samples
    assert err.startswith("\rscanning [") and f"{total:,}/{total:,} rows" in err


@pytest.mark.timeout(300)
def test_scheduler_address_runs_on_a_dask_cluster(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    distributed = pytest.importorskip("distributed")
    store, raw = str(dataset.store.store_dir), str(dataset.raw.raw_dir)
    local_stats = _json(capsys, ["store", "stats", store, "--all", "--json"])
    local_coverage = _json(capsys, ["store", "coverage", store, "--raw", raw, "--json"])
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        address = cluster.scheduler_address
        on_cluster = ["--scheduler", address, "--json"]
        assert _json(capsys, ["store", "stats", store, "--all", *on_cluster]) == local_stats
        coverage = _json(capsys, ["store", "coverage", store, "--raw", raw, *on_cluster])
        assert coverage == local_coverage


@pytest.mark.timeout(120)
def test_unreachable_scheduler_is_one_line_naming_it(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    address = "tcp://127.0.0.1:1"
    assert main(["store", "stats", str(dataset.store.store_dir), "--scheduler", address]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vinlens: error: cannot reach the Dask scheduler at {address}")
    assert "\n" not in err
