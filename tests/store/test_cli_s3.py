"""``vinlens store info|stats|coverage s3://...`` against the suite's moto S3 server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from s3_server import S3Dataset

from vinlens.cli import main
from vinlens.store.access import DEFAULT_S3_OPTIONS

pytestmark = pytest.mark.timeout(300)


def _endpoint_option(s3_dataset: S3Dataset) -> list[str]:
    return [
        "--storage-option",
        f"client_kwargs.endpoint_url={s3_dataset.server.endpoint_url}",
    ]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _without_locations(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in record.items() if k not in {"store_dir", "raw_dataset_dir", "generation"}
    }


def test_info_stats_coverage_over_s3_equal_local(
    s3_dataset: S3Dataset, capsys: pytest.CaptureFixture[str]
) -> None:
    store_url = str(s3_dataset.remote.store_dir)
    raw_url = str(s3_dataset.remote.raw_dataset_dir)
    store = str(s3_dataset.local.store.store_dir)
    raw = str(s3_dataset.local.raw.raw_dir)
    option = _endpoint_option(s3_dataset)

    assert _json(capsys, ["store", "info", store_url, *option, "--json"]) == _json(
        capsys, ["store", "info", store, "--json"]
    )
    remote = _json(capsys, ["store", "stats", store_url, *option, "--all", "--json"])
    local = _json(capsys, ["store", "stats", store, "--all", "--json"])
    assert remote["store_dir"] == store_url
    assert _without_locations(remote) == _without_locations(local)

    remote = _json(
        capsys,
        ["store", "coverage", store_url, "--raw", raw_url, *option, "--json", "--workers", "2"],
    )
    local = _json(capsys, ["store", "coverage", store, "--raw", raw, "--json"])
    assert _without_locations(remote) == _without_locations(local)

    assert main(["store", "info", store_url, *option]) == 0
    assert f"store         {store_url}" in capsys.readouterr().out
    # botocore rewrites the retries dict it is given (max_attempts -> total_max_attempts);
    # the module's defaults must not be that dict, or docs/api.md and later clients change.
    assert "total_max_attempts" not in DEFAULT_S3_OPTIONS["config_kwargs"]["retries"]


def test_s3_errors_are_one_line_naming_the_url(
    s3_dataset: S3Dataset, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"s3://{s3_dataset.server.bucket}/no/such/store"
    assert main(["store", "info", missing, *_endpoint_option(s3_dataset)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vinlens: error: ") and "\n" not in err
    assert "no/such/store" in err
