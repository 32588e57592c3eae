"""The optional compiled float16 kernel (numba, the ``fast`` extra) counts exactly like numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vinlens.store.diagnostics import collect_vin_offline_dataset_stats, kernels
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store

pytest.importorskip("numba")


def _edge_values() -> np.ndarray:
    rng = np.random.default_rng(3)
    every_pattern = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    runs = np.zeros(10_007, dtype=np.float16)  # one repeated value hits one counter
    noise = (rng.normal(size=(37, 1001)) * 4).astype(np.float16)
    return np.concatenate([every_pattern, runs, noise.reshape(-1), every_pattern[:3]])


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 65_536, 112_583])
def test_compiled_counts_equal_bincount(size: int) -> None:
    values = _edge_values()[:size]
    assert values.size == size
    compiled = kernels.float16_counts_compiled(values)
    assert compiled is not None
    assert compiled.dtype == np.int64
    np.testing.assert_array_equal(compiled, kernels.float16_counts_numpy(values))
    assert int(compiled.sum()) == size


def test_compiled_counts_take_non_contiguous_blocks() -> None:
    values = _edge_values()[: 2 * 3 * 1000].reshape(6, 1000)[:, ::3]
    compiled = kernels.float16_counts_compiled(values)
    assert compiled is not None
    np.testing.assert_array_equal(compiled, kernels.float16_counts_numpy(values))


def test_stats_records_equal_with_and_without_the_compiled_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SyntheticStoreSpec(
        num_scenes=2, snippets_per_scene=3, samples_per_snippet=2, rows_per_shard=4, seed=5
    )
    store = write_synthetic_store(tmp_path / "store", spec).store_dir
    calls = {"compiled": 0}
    compiled = kernels.float16_counts_compiled

    def counting(values: np.ndarray) -> np.ndarray | None:
        calls["compiled"] += 1
        return compiled(values)

    monkeypatch.setattr(kernels, "float16_counts_compiled", counting)
    monkeypatch.setattr(kernels, "COMPILED_AFTER", 1 << 62)
    plain = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert calls["compiled"] == 0
    monkeypatch.setattr(kernels, "COMPILED_AFTER", 0)
    monkeypatch.setattr(kernels, "_f16_counted", 0)
    fast = collect_vin_offline_dataset_stats(store, max_samples=None)
    assert calls["compiled"] > 0
    assert fast == plain
