"""Pearson r of the RRI pairs, computed by the engine (the dashboard only shows it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vinlens.store.diagnostics import (
    RriPairCorrelation,
    collect_vin_offline_dataset_stats,
    pearson_r,
    rri_component_correlations,
    rri_pair_arrays,
)
from vinlens.store.diagnostics import problems as problems_module
from vinlens.store.synthetic import SyntheticStoreRecord


def test_correlations_of_a_real_store_match_numpy(small_store: SyntheticStoreRecord) -> None:
    stats = collect_vin_offline_dataset_stats(small_store.store_dir)
    assert stats.rri_component_pairs, "the synthetic store has paired components"
    correlations = rri_component_correlations(stats)
    assert [c.name for c in correlations] == sorted(stats.rri_component_pairs)
    for corr in correlations:
        pairs = np.asarray(stats.rri_component_pairs[corr.name], dtype=np.float64)
        assert corr.count == len(pairs)
        if corr.pearson is None:
            assert len(pairs) < 2 or pairs[:, 0].std() == 0 or pairs[:, 1].std() == 0
        else:
            assert corr.pearson == pytest.approx(np.corrcoef(pairs[:, 1], pairs[:, 0])[0, 1])
    assert rri_component_correlations(stats.rri_component_pairs) == correlations


def test_undefined_correlations_are_none_not_zero(small_store: SyntheticStoreRecord) -> None:
    stats = collect_vin_offline_dataset_stats(small_store.store_dir)
    flat = dataclasses.replace(
        stats,
        rri_component_pairs={"flat": [(0.1, 1.0), (0.2, 1.0)], "one": [(0.3, 2.0)], "none": []},
    )
    assert rri_component_correlations(flat) == (
        RriPairCorrelation("flat", 2, None),
        RriPairCorrelation("none", 0, None),
        RriPairCorrelation("one", 1, None),
    )
    line = {"up": [(float(i), 2.0 * i + 1.0) for i in range(5)]}
    assert rri_component_correlations(line)[0].pearson == pytest.approx(1.0)


def test_malformed_pairs_name_the_component() -> None:
    with pytest.raises(ValueError, match="RRI pairs of 'novelty'"):
        rri_component_correlations({"novelty": [(1.0, 2.0, 3.0)]})  # type: ignore[list-item]
    rri, value = rri_pair_arrays([(0.5, 1.5), (2.5, 3.5)])
    assert rri.tolist() == [0.5, 2.5] and value.tolist() == [1.5, 3.5]
    # the old import place keeps working
    assert problems_module.pearson_r is pearson_r
