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


@pytest.fixture(scope="module")
def second_s3_server(s3_server: Any) -> Any:
    """A second, separate S3 server (moto in its own process: its own buckets), as a copy
    of the store at another provider; the suite's fake credentials are in the environment."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from s3_server import S3Server, s3_filesystem

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    try:
        record = S3Server(endpoint_url=f"http://127.0.0.1:{port}", bucket="vinlens-other")
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(record.endpoint_url, timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the second moto server did not start") from None
                time.sleep(0.1)
        s3_filesystem(record).mkdir(record.bucket)
        yield record
    finally:
        proc.terminate()
        proc.wait(30)


def test_compare_two_stores_on_two_endpoints_with_per_store_options(
    s3_dataset: S3Dataset, second_s3_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url_a = s3_dataset.remote.store_dir
    url_b = second_s3_server.upload(s3_dataset.local.store.store_dir, "copy/store")
    endpoint_a = f"client_kwargs.endpoint_url={s3_dataset.server.endpoint_url}"
    endpoint_b = f"client_kwargs.endpoint_url={second_s3_server.endpoint_url}"
    # One shared endpoint (A's) and B's own over it.
    record = _json(
        capsys,
        [
            "store",
            "compare",
            url_a,
            url_b,
            "--all",
            "--json",
            "--storage-option",
            endpoint_a,
            "--storage-option-b",
            endpoint_b,
        ],
    )
    assert record["store_a"] == url_a and record["store_b"] == url_b
    assert record["num_samples_a"] == record["num_samples_b"] > 0
    assert record["samples_only_in_a"] == record["samples_only_in_b"] == 0
    assert all(field["js_distance"] == 0 for field in record["fields"])
    # Without B's own endpoint, B is looked for on A's server: a one-line error naming it.
    code = main(["store", "compare", url_a, url_b, "--storage-option", endpoint_a])
    err = capsys.readouterr().err
    assert code == 1 and url_b in err and "Traceback" not in err
