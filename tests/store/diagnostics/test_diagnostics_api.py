"""The public surface of ``vinlens.store.diagnostics`` is the seed's (001), field for field."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from vinlens.store import diagnostics

# (class, seed fields in order, seed defaults) from seeds/001_28efebf73410542c.txt
SEED_RECORDS = {
    "NumericSummary": (["count", "minimum", "mean", "maximum"], {}),
    "VinOfflineBackboneDiagnostic": (
        ["field", "shape", "numel", "sampled_rows", "count", "mean", "std", "abs_mean", "nz_frac"],
        {},
    ),
    "VinOfflineBlockDiagnostic": (
        ["shard_id", "name", "kind", "dtype", "shape", "optional", "estimated_bytes"],
        {},
    ),
    "VinOfflineCoverageSceneDiagnostic": (
        [
            "scene_id",
            "dataset_snippets",
            "store_snippets",
            "covered_snippets",
            "missing_in_store",
            "outside_dataset",
            "coverage",
        ],
        {},
    ),
    "VinOfflineCoverageStats": (
        [
            "store_dir",
            "tar_shards_scanned",
            "dataset_scenes",
            "store_scenes",
            "dataset_snippets",
            "store_snippets",
            "covered_snippets",
            "missing_in_store",
            "outside_dataset",
            "coverage",
            "per_scene",
            "missing_examples",
            "outside_examples",
        ],
        {"per_scene": [], "missing_examples": [], "outside_examples": []},
    ),
    "VinOfflineDatasetStats": (
        [
            "store_dir",
            "version",
            "num_samples",
            "sampled_samples",
            "split_counts",
            "num_scenes",
            "num_snippets",
            "materialized_blocks",
            "candidate_count",
            "rri",
            "vin_points",
            "numeric_bytes",
            "block_shapes",
            "block_diagnostics",
            "sample_summaries",
            "candidate_count_values",
            "rri_values",
            "vin_point_values",
            "rri_component_values",
            "rri_component_summaries",
            "candidate_pose_values",
            "candidate_pose_summaries",
            "memory_diagnostics",
            "backbone_diagnostics",
            "scene_labels_available",
            "batch_shapes_available",
            "batch_shapes",
            "rri_component_pairs",
            "rri_pairing_unavailable_sample_keys",
        ],
        {
            "block_shapes": {},
            "block_diagnostics": [],
            "sample_summaries": [],
            "candidate_count_values": [],
            "rri_values": [],
            "vin_point_values": [],
            "rri_component_values": {},
            "rri_component_summaries": {},
            "candidate_pose_values": {},
            "candidate_pose_summaries": {},
            "memory_diagnostics": [],
            "backbone_diagnostics": [],
            "scene_labels_available": True,
            "batch_shapes_available": True,
            "batch_shapes": {},
            "rri_component_pairs": {},
            "rri_pairing_unavailable_sample_keys": [],
        },
    ),
    "VinOfflineDatasetStatsRequest": (
        ["selection", "generation", "max_samples"],
        {"max_samples": 512},
    ),
    "VinOfflineMemoryDiagnostic": (["component", "mean_mib", "median_mib", "p95_mib"], {}),
    "VinOfflineSampleDiagnostic": (
        [
            "sample_index",
            "sample_key",
            "scene_id",
            "snippet_id",
            "split",
            "shard_id",
            "row",
            "candidate_count",
            "rri",
            "vin_points",
        ],
        {},
    ),
}


def _default(f: dataclasses.Field[object]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("name", sorted(SEED_RECORDS))
def test_records_keep_the_seed_fields_in_order(name: str) -> None:
    cls = getattr(diagnostics, name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    seed_fields, seed_defaults = SEED_RECORDS[name]
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields[: len(seed_fields)]] == seed_fields
    for f in fields[: len(seed_fields)]:
        expected = seed_defaults.get(f.name, dataclasses.MISSING)
        assert _default(f) == expected, f.name
    # Fields added after the seed's all have defaults, so seed-style construction works.
    assert all(_default(f) is not dataclasses.MISSING for f in fields[len(seed_fields) :])


def test_functions_keep_the_seed_signatures() -> None:
    def params(fn: object) -> list[tuple[str, object, object]]:
        return [
            (p.name, p.kind, p.default)
            for p in inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        ]

    kw = inspect.Parameter.KEYWORD_ONLY
    pos = inspect.Parameter.POSITIONAL_OR_KEYWORD
    empty = inspect.Parameter.empty
    # The seed's parameters, then the additions, each keyword-only with a default: the
    # executor, and for the long scans the cancel token (calls written to the seed work).
    assert params(diagnostics.collect_vin_offline_dataset_stats) == [
        ("store", pos, empty),
        ("max_samples", kw, 512),
        ("executor", kw, None),
    ]
    assert params(diagnostics.capture_vin_offline_dataset_stats_request) == [
        ("store", pos, empty),
        ("max_samples", kw, 512),
    ]
    assert params(diagnostics.collect_vin_offline_dataset_coverage) == [
        ("store", pos, empty),
        ("max_tars", kw, None),
        ("progress_cb", kw, None),
        ("executor", kw, None),
        ("cancel", kw, None),
    ]
    assert params(diagnostics.inspect_vin_offline_dataset_stats) == [
        ("request", pos, empty),
        ("executor", pos, None),
    ]
    assert params(diagnostics.VinOfflineDatasetStatsRequest.digest) == [("self", pos, empty)]
