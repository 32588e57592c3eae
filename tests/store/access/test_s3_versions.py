"""An fsspec / s3fs older than the ``s3`` extra requires (issue 23, class 4).

With s3fs 0.4 every zarr block of a zstd store failed inside s3fs and was reported as a
CorruptChunkError, blaming the store. The versions are checked at the first remote access
and an old one is an ImportError naming ``pip install 'vinlens[s3]'``, before any request.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from vinlens.store.access import _fsspec as access_remote
from vinlens.store.access import open_store_access
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fresh_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_remote, "_checked_versions", set())


def _seen(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]) -> None:
    real = access_remote.installed_version
    monkeypatch.setattr(
        access_remote, "installed_version", lambda name: versions.get(name) or real(name)
    )


@pytest.mark.parametrize(
    ("versions", "named"),
    [({"s3fs": "0.4.2"}, "s3fs 0.4.2"), ({"fsspec": "2023.1.0"}, "fsspec 2023.1.0")],
)
def test_old_s3fs_or_fsspec_is_refused_naming_the_extra(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], named: str
) -> None:
    _seen(monkeypatch, versions)
    with pytest.raises(ImportError, match=re.escape(named)) as info:
        open_store_access("s3://bucket/store", {"anon": True})
    assert "pip install -U 'vinlens[s3]'" in str(info.value)
    assert "s3://bucket/store" in str(info.value)


def test_the_reader_refuses_before_any_request(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seen(monkeypatch, {"s3fs": "0.4.2"})
    # An endpoint nobody listens on: had a request been made it would be a network error.
    config = VinOfflineStoreConfig(
        store_dir="s3://bucket/store",
        storage_options={"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}},
    )
    with pytest.raises(ImportError, match=r"vinlens\[s3\]"):
        VinOfflineStoreReader(config)


def test_current_versions_pass_and_the_check_runs_once(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = access_remote.installed_version

    def counting(name: str) -> str | None:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(access_remote, "installed_version", counting)
    open_store_access("memory://versions-a")
    open_store_access("memory://versions-b")
    assert calls == ["fsspec"]


def test_release_parsing_orders_versions() -> None:
    release = access_remote._release
    assert release("2024.6.1") == (2024, 6, 1)
    assert release("0.4.2") < release("2024.6")
    assert release("2024.10.0") > release("2024.6")
    assert release("2024.6.0rc1") == (2024, 6, 0)


def test_minimums_match_the_s3_extra() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["s3"]
    declared = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", r).groups() for r in extra)
    assert declared == access_remote.S3_EXTRA_MINIMUMS
