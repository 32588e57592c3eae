"""The engine's ranked problem list, Pearson r and the one max_samples rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vinlens.cli.store_tables import format_stats
from vinlens.store.diagnostics import (
    PROBLEM_SEVERITIES,
    StoreIntegrityProblem,
    check_max_samples,
    collect_vin_offline_dataset_stats,
    dashboard_problems,
    pearson_r,
    scan_scope,
)
from vinlens.store.synthetic import SyntheticStoreRecord


def test_problems_are_ranked_and_the_cli_shows_the_same(small_store: SyntheticStoreRecord) -> None:
    stats = collect_vin_offline_dataset_stats(small_store.store_dir)
    problems = dashboard_problems(stats)
    # The synthetic store has a row without valid candidates and a shard without ids.
    assert [p["severity"] for p in problems] == ["warning", "notice"]
    assert "without any valid candidate" in problems[0]["title"]
    damaged = dataclasses.replace(
        stats,
        integrity_problems=[
            StoreIntegrityProblem("CorruptChunkError", "00001", "rri", "/x", "bad")
        ],
    )
    ranked = dashboard_problems(damaged)
    assert [p["severity"] for p in ranked] == ["error", "warning", "notice"]
    assert ranked[0]["title"] == "CorruptChunkError in shard 00001/rri"
    assert [p["severity"] for p in ranked] == sorted(
        (p["severity"] for p in ranked), key=PROBLEM_SEVERITIES.index
    )
    text = format_stats(stats)
    assert "1 warning(s), 1 notice(s)" in text
    for problem in problems:
        assert problem["title"] in text


def test_pearson_r() -> None:
    x = np.arange(10, dtype=np.float64)
    assert pearson_r(x, 2 * x + 1) == pytest.approx(1.0)
    assert pearson_r(x, -x) == pytest.approx(-1.0)
    assert pearson_r(x, np.ones(10)) is None
    assert pearson_r([1.0], [2.0]) is None
    with pytest.raises(ValueError, match="equally long"):
        pearson_r([1.0, 2.0], [1.0])


@pytest.mark.parametrize("value", [None, 0, 1, 512, 8.0])
def test_max_samples_accepted(value: object) -> None:
    checked = check_max_samples(value)
    assert checked == value and (checked is None or type(checked) is int)


@pytest.mark.parametrize("value", [-1, 2.5, True, "8", float("nan"), float("inf")])
def test_max_samples_refused_naming_the_value(value: object) -> None:
    with pytest.raises(ValueError, match=r"max_samples must be None or an integer >= 0, got"):
        check_max_samples(value)


def test_problem_titles_say_which_rows_were_read(small_store: SyntheticStoreRecord) -> None:
    # max_samples 512 on a 24-row store reads every row: the words say so, with the real
    # number, never the cap.
    stats = collect_vin_offline_dataset_stats(small_store.store_dir, max_samples=512)
    assert stats.num_samples == stats.sampled_samples == 24
    assert scan_scope(stats) == "all 24 rows scanned"
    titles = [p["title"] for p in dashboard_problems(stats)]
    assert titles[0] == "1 row without any valid candidate (all 24 rows scanned)"
    assert titles[1].endswith("labelled rows without candidate IDs (all 24 rows scanned)")
    for title in titles:
        assert "sampled sample" not in title and "512" not in title
    partial = collect_vin_offline_dataset_stats(small_store.store_dir, max_samples=16)
    assert scan_scope(partial) == "16 of 24 rows sampled"
    for problem in dashboard_problems(partial):
        if problem["severity"] != "error" and "candidate" in problem["title"]:
            assert problem["title"].endswith("(16 of 24 rows sampled)")
