"""Matplotlib figures of store diagnostics, for scripts, reports and notebooks without widgets.

Every function takes a diagnostics record and returns a :class:`matplotlib.figure.Figure`.
Figures are built with the object-oriented API (``Figure`` + its canvas), never through
``pyplot``: no global figure registry, no backend switch, safe under Agg, in threads and
on headless machines. Pass ``ax=`` to draw into an existing axes instead (its figure is
returned). Series that a store cannot provide (candidate counts without scene labels)
are drawn as an explicit "unavailable" panel, never as zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vinlens.store.coverage import VinOfflineCoverageStats
from vinlens.store.diagnostics import VinOfflineDatasetStats

__all__ = [
    "plot_candidate_count_histogram",
    "plot_dataset_overview",
    "plot_rri_histogram",
    "plot_scene_coverage",
    "plot_vin_point_histogram",
]

_COLORS = {
    "primary": "#3b6ea8",
    "covered": "#4c9a5b",
    "missing": "#d08c3a",
    "outside": "#9a9a9a",
}


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        figure = ax.get_figure()
        if not isinstance(figure, Figure):
            raise ValueError("ax must belong to a matplotlib Figure")
        return figure, ax
    figure = Figure(figsize=figsize, layout="constrained")
    return figure, figure.add_subplot()


def _message(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.35")
    ax.set_xticks([])
    ax.set_yticks([])


def _histogram(
    ax: Axes,
    values: Sequence[float],
    *,
    bins: Any,
    title: str,
    xlabel: str,
    unavailable: str | None = None,
) -> None:
    ax.set_title(title)
    if unavailable is not None:
        _message(ax, unavailable)
        return
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        _message(ax, "no values in the scanned rows")
        return
    ax.hist(data, bins=bins, color=_COLORS["primary"], edgecolor="white", linewidth=0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")


def _integer_bins(values: Sequence[int]) -> np.ndarray | str:
    """One bin per integer for small ranges, so bars sit on whole counts."""
    if not values:
        return "auto"
    lo, hi = int(min(values)), int(max(values))
    if hi - lo > 200:
        return "auto"
    return np.arange(lo, hi + 2) - 0.5


def plot_candidate_count_histogram(
    stats: VinOfflineDatasetStats, *, ax: Axes | None = None, bins: Any = None
) -> Figure:
    """Histogram of valid candidates per sampled row (unavailable without scene labels)."""
    figure, ax = _axes(ax, (5.0, 3.2))
    unavailable = None
    if not stats.scene_labels_available or stats.candidate_count is None:
        unavailable = "unavailable: the store has no scene labels"
    _histogram(
        ax,
        stats.candidate_count_values,
        bins=_integer_bins(stats.candidate_count_values) if bins is None else bins,
        title="valid candidates per sample",
        xlabel="valid candidates",
        unavailable=unavailable,
    )
    return figure


def plot_rri_histogram(
    stats: VinOfflineDatasetStats, *, ax: Axes | None = None, bins: Any = "auto"
) -> Figure:
    """Histogram of finite oracle RRI over valid candidates of the sampled rows."""
    figure, ax = _axes(ax, (5.0, 3.2))
    unavailable = None
    if not stats.scene_labels_available or stats.rri is None:
        unavailable = "unavailable: the store has no scene labels"
    _histogram(
        ax,
        stats.rri_values,
        bins=bins,
        title="oracle RRI (valid candidates, finite)",
        xlabel="RRI",
        unavailable=unavailable,
    )
    return figure


def plot_vin_point_histogram(
    stats: VinOfflineDatasetStats, *, ax: Axes | None = None, bins: Any = "auto"
) -> Figure:
    """Histogram of VIN point counts per sampled row."""
    figure, ax = _axes(ax, (5.0, 3.2))
    _histogram(
        ax,
        stats.vin_point_values,
        bins=bins,
        title="VIN points per sample",
        xlabel="points",
    )
    return figure


def plot_scene_coverage(
    coverage: VinOfflineCoverageStats, *, ax: Axes | None = None, max_scenes: int = 60
) -> Figure:
    """Per-scene snippets: covered, missing from the store, and store-only, as stacked bars.

    Scenes are drawn in ``per_scene`` order (sorted ids); with more than ``max_scenes``
    scenes the ones with the most missing snippets are shown and the title says so.
    """
    rows = list(coverage.per_scene)
    title = "raw-dataset coverage per scene"
    if coverage.coverage is not None:
        title += f" (overall {100 * coverage.coverage:.1f}%)"
    if len(rows) > max_scenes:
        worst = sorted(rows, key=lambda r: (-r.missing_in_store, r.scene_id))[:max_scenes]
        keep = {r.scene_id for r in worst}
        rows = [r for r in rows if r.scene_id in keep]
        title += f", {max_scenes} of {len(coverage.per_scene)} scenes with most missing"
    figure, ax = _axes(ax, (max(5.0, 0.28 * len(rows) + 2.0), 3.6))
    ax.set_title(title)
    if not rows:
        _message(ax, "no scenes in the store or the scanned tars")
        return figure
    x = np.arange(len(rows))
    covered = np.array([r.covered_snippets for r in rows])
    missing = np.array([r.missing_in_store for r in rows])
    outside = np.array([r.outside_dataset for r in rows])
    ax.bar(x, covered, color=_COLORS["covered"], label="covered")
    ax.bar(x, missing, bottom=covered, color=_COLORS["missing"], label="missing in store")
    ax.bar(x, outside, bottom=covered + missing, color=_COLORS["outside"], label="store only")
    ax.set_xticks(x, [r.scene_id for r in rows], rotation=90, fontsize=7)
    ax.set_ylabel("snippets")
    ax.legend(fontsize=8, loc="upper right")
    return figure


def plot_dataset_overview(stats: VinOfflineDatasetStats) -> Figure:
    """Candidate counts, RRI and VIN point lengths side by side in one figure."""
    figure = Figure(figsize=(14.0, 3.4), layout="constrained")
    axes = figure.subplots(1, 3)
    plot_candidate_count_histogram(stats, ax=axes[0])
    plot_rri_histogram(stats, ax=axes[1])
    plot_vin_point_histogram(stats, ax=axes[2])
    figure.suptitle(
        f"{stats.store_dir}: {stats.sampled_samples} of {stats.num_samples} samples scanned"
    )
    return figure
