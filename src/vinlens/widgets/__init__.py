"""Notebook widgets (anywidget) that show the records of the vinlens engines."""
