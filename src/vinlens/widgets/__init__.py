"""Notebook widgets (anywidget) that show the records of the vinlens engines."""
from vinlens.widgets.attribution_viewer import AttributionViewerWidget as AttributionViewerWidget
