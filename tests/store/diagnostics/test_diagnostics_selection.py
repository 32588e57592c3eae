"""Quota rules of the deterministic sample selection, and the bounded accumulators (hypothesis)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vinlens.store.diagnostics import (
    SELECTION_RUN_LENGTH,
    apportion,
    select_vin_offline_sample_indices,
)
from vinlens.store.diagnostics.kernels import weighted_percentile
from vinlens.store.diagnostics.sampling import Reservoir

sizes_strategy = st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=8)


@given(sizes=sizes_strategy, budget=st.integers(min_value=0, max_value=400))
def test_apportion_rules(sizes: list[int], budget: int) -> None:
    counts = apportion(sizes, budget)
    total = sum(sizes)
    assert sum(counts) == min(budget, total)
    assert all(0 <= c <= s for c, s in zip(counts, sizes, strict=True))
    if budget >= total:
        assert counts == sizes
        return
    nonempty = [i for i, s in enumerate(sizes) if s > 0]
    if budget >= len(nonempty):
        assert all(counts[i] >= 1 for i in nonempty)
        remainder = budget - len(nonempty)
        weight = total - len(nonempty)
        for i in nonempty:
            exact = remainder * (sizes[i] - 1) / weight
            assert math.floor(exact) <= counts[i] - 1 <= math.ceil(exact)
    else:
        assert all(c in (0, 1) for c in counts)
        # the chosen groups are the largest ones
        chosen = [sizes[i] for i, c in enumerate(counts) if c]
        left_out = [sizes[i] for i in nonempty if not counts[i]]
        assert not chosen or not left_out or min(chosen) >= max(left_out)


groups_strategy = st.lists(
    st.tuples(
        st.sampled_from(["train", "val", "test"]),
        st.sampled_from(["00000", "00001", "00002", "00003"]),
    ),
    min_size=0,
    max_size=300,
)


@settings(max_examples=200)
@given(groups=groups_strategy, budget=st.one_of(st.none(), st.integers(min_value=0, max_value=320)))
def test_selection_quotas(groups: list[tuple[str, str]], budget: int | None) -> None:
    chosen = select_vin_offline_sample_indices(groups, budget)
    n = len(groups)
    assert chosen == sorted(set(chosen))
    assert all(0 <= i < n for i in chosen)
    assert chosen == select_vin_offline_sample_indices(list(groups), budget)  # deterministic
    if budget is None or budget >= n:
        assert chosen == list(range(n))
        return
    assert len(chosen) == budget
    splits = sorted({s for s, _ in groups})
    split_sizes = [sum(1 for s, _ in groups if s == split) for split in splits]
    per_split = Counter(groups[i][0] for i in chosen)
    assert [per_split[s] for s in splits] == apportion(split_sizes, budget)
    for split, quota in zip(splits, apportion(split_sizes, budget), strict=True):
        shards = sorted({k for s, k in groups if s == split})
        shard_sizes = [sum(1 for g in groups if g == (split, k)) for k in shards]
        per_shard = Counter(groups[i][1] for i in chosen if groups[i][0] == split)
        assert [per_shard[k] for k in shards] == apportion(shard_sizes, quota)
        for shard_id in shards:
            cell = [i for i, g in enumerate(groups) if g == (split, shard_id)]
            taken = [cell.index(i) for i in chosen if groups[i] == (split, shard_id)]
            if not taken:
                continue
            runs = 1 + sum(1 for a, b in itertools.pairwise(taken) if b != a + 1)
            assert runs <= math.ceil(len(taken) / SELECTION_RUN_LENGTH)


def test_selection_spreads_over_a_shard() -> None:
    groups = [("train", "00000")] * 1000
    chosen = select_vin_offline_sample_indices(groups, 64)
    assert len(chosen) == 64
    assert chosen[0] > 0 and chosen[-1] > 800  # not the first rows: runs spread over the cell
    runs = 1 + sum(1 for a, b in itertools.pairwise(chosen) if b != a + 1)
    assert runs == 4


@given(
    st.dictionaries(st.integers(0, 10_000), st.integers(0, 50), min_size=1, max_size=30),
    st.floats(min_value=0, max_value=100),
)
def test_weighted_percentile_matches_numpy(counts: dict[int, int], q: float) -> None:
    values = np.repeat(list(counts), list(counts.values()))
    if values.size == 0:
        assert weighted_percentile(counts, q) == 0.0
        return
    assert math.isclose(
        weighted_percentile(counts, q), float(np.percentile(values, q)), rel_tol=1e-9, abs_tol=1e-9
    )


# No deadline: a loaded shared machine stretches an example past hypothesis' 200 ms.
@settings(deadline=None)
@given(st.integers(min_value=0, max_value=2**31), st.integers(min_value=1, max_value=50))
def test_reservoir_is_bounded_and_order_independent(seed: int, batches: int) -> None:
    rng = np.random.default_rng(seed)
    positions = rng.permutation(5000)[: rng.integers(1, 5000)]
    values = positions.astype(np.float64) * 0.5
    forward = Reservoir(1, salt=3, limit=200)
    backward = Reservoir(1, salt=3, limit=200)
    parts = np.array_split(np.arange(positions.size), batches)
    for part in parts:
        forward.add(positions[part], values[part])
    for part in reversed(parts):
        backward.add(positions[part][::-1], values[part][::-1])
    kept = forward.rows()[:, 0]
    assert kept.size == min(200, positions.size)
    np.testing.assert_array_equal(kept, backward.rows()[:, 0])
    assert np.all(np.diff(kept) > 0)  # returned in position order
    assert set(kept.tolist()) <= set(values.tolist())
