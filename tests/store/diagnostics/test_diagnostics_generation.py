"""Generation-bound requests: digests, and stores replaced before or during a read."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from vinlens.store.diagnostics import (
    VinOfflineDatasetStatsRequest,
    VinOfflineStoreReplacedError,
    acquire,
    capture_vin_offline_dataset_stats_request,
    collect_vin_offline_dataset_stats,
    inspect_vin_offline_dataset_stats,
)
from vinlens.store.format import StoreReplacedError
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_synthetic_store(tmp_path / "store", SyntheticStoreSpec(seed=5)).store_dir


def _other_store(path: Path) -> Path:
    return write_synthetic_store(path, SyntheticStoreSpec(seed=6, num_scenes=2)).store_dir


def test_request_captures_without_reading_payload(store: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store, max_samples=7)
    assert request.max_samples == 7
    assert request.selection.store_dir == str(store)
    generation = request.generation
    assert generation.manifest.path == str(store / "manifest.json")
    assert generation.sample_index.path == str(store / "sample_index.jsonl")
    st = os.stat(store)
    assert (generation.store_dir.inode, generation.store_dir.device) == (st.st_ino, st.st_dev)
    result = inspect_vin_offline_dataset_stats(request)
    assert result == collect_vin_offline_dataset_stats(store, max_samples=7)
    assert result.generation == generation.to_json_dict()


def test_digest_is_deterministic_and_sensitive(store: Path, tmp_path: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store)
    again = capture_vin_offline_dataset_stats_request(store)
    assert request == again and request.digest() == again.digest()
    assert len(request.digest()) == 64 and int(request.digest(), 16) >= 0
    code = (
        "from vinlens.store.diagnostics import capture_vin_offline_dataset_stats_request as c;"
        f"print(c({str(store)!r}).digest())"
    )
    other_process = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert other_process == request.digest()

    digests = {
        request.digest(),
        dataclasses.replace(request, max_samples=None).digest(),
        dataclasses.replace(request, max_samples=511).digest(),
        dataclasses.replace(
            request, selection=dataclasses.replace(request.selection, store_dir="/elsewhere")
        ).digest(),
        dataclasses.replace(
            request,
            generation=dataclasses.replace(request.generation, manifest_sha256="0" * 64),
        ).digest(),
        dataclasses.replace(
            request,
            generation=dataclasses.replace(
                request.generation,
                manifest=dataclasses.replace(
                    request.generation.manifest, mtime_ns=request.generation.manifest.mtime_ns + 1
                ),
            ),
        ).digest(),
    }
    assert len(digests) == 6
    with pytest.raises(ValueError, match="max_samples"):
        dataclasses.replace(request, max_samples=-3)
    with pytest.raises(ValueError, match="max_samples"):
        capture_vin_offline_dataset_stats_request(store, max_samples=True)  # type: ignore[arg-type]


def test_store_replaced_before_the_read(store: Path, tmp_path: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store)
    write_synthetic_store(store, SyntheticStoreSpec(seed=9), replace=True)
    with pytest.raises(VinOfflineStoreReplacedError, match="before the read started"):
        inspect_vin_offline_dataset_stats(request)
    assert issubclass(VinOfflineStoreReplacedError, StoreReplacedError)
    fresh = capture_vin_offline_dataset_stats_request(store)
    assert fresh.digest() != request.digest()
    inspect_vin_offline_dataset_stats(fresh)  # the new generation reads fine


def test_manifest_rewritten_in_place_with_same_size(store: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store)
    manifest = store / "manifest.json"
    data = manifest.read_bytes()
    st = manifest.stat()
    manifest.write_bytes(data.replace(b'"created_at": "2', b'"created_at": "3', 1))
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert manifest.stat().st_size == st.st_size
    with pytest.raises(VinOfflineStoreReplacedError):
        inspect_vin_offline_dataset_stats(request)


def _replace_in_thread_on_first_read(
    monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]
) -> threading.Thread:
    """Pause the first payload read until another thread has swapped the store."""
    started = threading.Event()
    swapped = threading.Event()
    original = VinOfflineStoreReader.read_window

    def worker() -> None:
        started.wait(timeout=30)
        swap()
        swapped.set()

    def read_window(self: VinOfflineStoreReader, *args: object, **kwargs: object) -> object:
        if not started.is_set():
            started.set()
            assert swapped.wait(timeout=30), "replacement thread did not finish"
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(VinOfflineStoreReader, "read_window", read_window)
    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    return thread


def test_store_replaced_during_the_read(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replacement = _other_store(tmp_path / "next")

    def swap() -> None:
        os.rename(store, tmp_path / "old")
        os.rename(replacement, store)

    request = capture_vin_offline_dataset_stats_request(store, max_samples=None)
    thread = _replace_in_thread_on_first_read(monkeypatch, swap)
    with pytest.raises(VinOfflineStoreReplacedError, match="while it was being read"):
        inspect_vin_offline_dataset_stats(request)
    thread.join(timeout=30)
    assert (store / "manifest.json").exists() and (tmp_path / "old").exists()


def test_store_removed_during_the_read(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _replace_in_thread_on_first_read(
        monkeypatch, lambda: os.rename(store, tmp_path / "gone")
    )
    with pytest.raises(VinOfflineStoreReplacedError):
        collect_vin_offline_dataset_stats(store, max_samples=None)
    thread.join(timeout=30)


def test_reader_generation_is_compared_with_the_request(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replacement between the pre-check and the open is caught from the read handles."""
    request = capture_vin_offline_dataset_stats_request(store)
    real = acquire._current_generation
    calls = {"n": 0}

    def first_call_sees_the_old_generation(path: str) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            return request.generation
        return real(path)

    write_synthetic_store(store, SyntheticStoreSpec(seed=12), replace=True)
    monkeypatch.setattr(acquire, "_current_generation", first_call_sees_the_old_generation)
    with pytest.raises(VinOfflineStoreReplacedError, match="between the request and the read"):
        inspect_vin_offline_dataset_stats(request)


def test_request_is_frozen(store: Path) -> None:
    request = capture_vin_offline_dataset_stats_request(store)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_samples = 3  # type: ignore[misc]
    assert isinstance(request, VinOfflineDatasetStatsRequest)
