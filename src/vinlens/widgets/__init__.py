"""Notebook widgets (anywidget) that show the records of the vinlens engines."""
from vinlens.widgets.attribution_viewer import AttributionViewerWidget as AttributionViewerWidget
from vinlens.widgets.coverage_heatmap import CoverageHeatmapWidget as CoverageHeatmapWidget
from vinlens.widgets.store_dashboard import StoreDashboardWidget as StoreDashboardWidget
