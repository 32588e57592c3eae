"""``vinlens.plotting``: figures whose bars are the diagnostics' values, without pyplot."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from vinlens.plotting import (
    plot_candidate_count_histogram,
    plot_dataset_overview,
    plot_rri_histogram,
    plot_scene_coverage,
    plot_vin_point_histogram,
)
from vinlens.store.coverage import collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import VinOfflineDatasetStats, collect_vin_offline_dataset_stats
from vinlens.store.synthetic import (
    SyntheticDatasetRecord,
    SyntheticStoreSpec,
    write_synthetic_dataset,
    write_synthetic_store,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDatasetRecord:
    return write_synthetic_dataset(tmp_path_factory.mktemp("plots"))


@pytest.fixture(scope="module")
def stats(dataset: SyntheticDatasetRecord) -> VinOfflineDatasetStats:
    return collect_vin_offline_dataset_stats(dataset.config, max_samples=None)


def _bar_heights(figure: Figure, axes_index: int = 0) -> list[float]:
    ax = figure.axes[axes_index]
    return [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def test_histograms_count_the_record_values(stats: VinOfflineDatasetStats) -> None:
    figure = plot_candidate_count_histogram(stats)
    values = np.array(stats.candidate_count_values)
    edges = np.arange(values.min(), values.max() + 2) - 0.5
    assert _bar_heights(figure) == np.histogram(values, bins=edges)[0].tolist()
    assert figure.axes[0].get_xlabel() == "valid candidates"

    figure = plot_rri_histogram(stats, bins=10)
    assert _bar_heights(figure) == np.histogram(stats.rri_values, bins=10)[0].tolist()

    figure = plot_vin_point_histogram(stats, bins=7)
    assert _bar_heights(figure) == np.histogram(stats.vin_point_values, bins=7)[0].tolist()
    assert _png(figure).startswith(b"\x89PNG")


def test_unlabelled_store_draws_unavailable_not_zero(tmp_path: Path) -> None:
    record = write_synthetic_store(tmp_path / "s", SyntheticStoreSpec(scene_labels=False))
    stats = collect_vin_offline_dataset_stats(record.config)
    for plot in (plot_candidate_count_histogram, plot_rri_histogram):
        figure = plot(stats)
        assert _bar_heights(figure) == []
        texts = [t.get_text() for t in figure.axes[0].texts]
        assert any("unavailable" in t for t in texts)
    assert sum(_bar_heights(plot_vin_point_histogram(stats))) == stats.sampled_samples


def test_scene_coverage_bars(dataset: SyntheticDatasetRecord) -> None:
    coverage = collect_vin_offline_dataset_coverage(dataset.config)
    figure = plot_scene_coverage(coverage)
    heights = _bar_heights(figure)
    n = len(coverage.per_scene)
    assert heights[:n] == [r.covered_snippets for r in coverage.per_scene]
    assert heights[n : 2 * n] == [r.missing_in_store for r in coverage.per_scene]
    assert heights[2 * n :] == [r.outside_dataset for r in coverage.per_scene]
    labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert labels == [r.scene_id for r in coverage.per_scene]
    assert "56.2%" in figure.axes[0].get_title()

    few = plot_scene_coverage(coverage, max_scenes=1)
    (label,) = [t.get_text() for t in few.axes[0].get_xticklabels()]
    assert label == max(coverage.per_scene, key=lambda r: r.missing_in_store).scene_id
    assert _png(few).startswith(b"\x89PNG")


def test_overview_and_drawing_into_given_axes(stats: VinOfflineDatasetStats) -> None:
    overview = plot_dataset_overview(stats)
    assert len(overview.axes) == 3
    target = Figure()
    ax = target.add_subplot()
    assert plot_rri_histogram(stats, ax=ax) is target
    assert sum(_bar_heights(target)) == len(stats.rri_values)


def test_plotting_does_not_touch_pyplot() -> None:
    code = "import sys, vinlens.plotting;print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "False"
