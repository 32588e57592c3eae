"""Notebook widgets (anywidget) that show the records of the vinlens engines."""

from vinlens.widgets._selection import ModuleSelection as ModuleSelection
from vinlens.widgets._show import show as show
from vinlens.widgets.attribution_viewer import AttributionViewerWidget as AttributionViewerWidget
from vinlens.widgets.config_tree import ConfigTreeWidget as ConfigTreeWidget
from vinlens.widgets.coverage_heatmap import CoverageHeatmapWidget as CoverageHeatmapWidget
from vinlens.widgets.model_health import ModelHealthWidget as ModelHealthWidget
from vinlens.widgets.module_table import ModuleTableWidget as ModuleTableWidget
from vinlens.widgets.run_compare import RunCompareWidget as RunCompareWidget
from vinlens.widgets.snapshot_browser import SnapshotBrowserWidget as SnapshotBrowserWidget
from vinlens.widgets.snapshot_browser import SnapshotTableWidget as SnapshotTableWidget
from vinlens.widgets.store_compare import StoreCompareWidget as StoreCompareWidget
from vinlens.widgets.store_dashboard import StoreDashboardWidget as StoreDashboardWidget
from vinlens.widgets.training_monitor import TrainingMonitorWidget as TrainingMonitorWidget

__all__ = [
    "AttributionViewerWidget",
    "ConfigTreeWidget",
    "CoverageHeatmapWidget",
    "ModelHealthWidget",
    "ModuleSelection",
    "ModuleTableWidget",
    "RunCompareWidget",
    "SnapshotBrowserWidget",
    "SnapshotTableWidget",
    "StoreCompareWidget",
    "StoreDashboardWidget",
    "TrainingMonitorWidget",
    "show",
]
