"""``--workers`` capped at the work and the CPUs (and said so); ``--scheduler`` without workers."""

from __future__ import annotations

import json
import os
import re

import pytest

import vinlens.cli.store as cli_store
from vinlens.cli import main
from vinlens.store.synthetic import SyntheticDatasetRecord, write_synthetic_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDatasetRecord:
    return write_synthetic_dataset(tmp_path_factory.mktemp("cli-faults"))


@pytest.mark.timeout(300)
def test_workers_are_capped_at_the_tasks_and_cpus_and_the_cap_is_said(
    dataset: SyntheticDatasetRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(dataset.store.store_dir)
    assert main(["store", "stats", store, "--all", "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["store", "stats", store, "--all", "--json", "--workers", "64"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == local
    shards = len({row["shard_id"] for row in local["block_diagnostics"]})
    cpus = os.cpu_count() or 1
    # Small shards are grouped into fewer tasks: the pool never exceeds tasks or CPUs.
    found = re.search(r"vinlens: --workers 64: using (\d+) worker process", err)
    assert found is not None, err
    assert 1 <= int(found.group(1)) <= min(shards, cpus)
    assert "task" in err
    assert "not the 64 asked for" in err


@pytest.mark.timeout(120)
def test_scheduler_without_workers_ends_in_one_line_naming_address_and_count(
    dataset: SyntheticDatasetRecord,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(cli_store, "SCHEDULER_WORKER_TIMEOUT", 1.0)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        code = main(["store", "stats", str(dataset.store.store_dir), "--scheduler", address])
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith("vinlens: error:")
    assert f"the Dask scheduler at {address} has 0 workers" in err
