"""``vinlens.show(obj)``: the widget that fits what the user has in hand.

Dispatch is by what ``obj`` is, checked in an order that resolves overlaps: a store
configuration is itself a Pydantic model, so it is recognised before the generic
configuration case. Widgets are imported when needed, so showing a config never loads
the store dashboard's code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["show"]

ACCEPTED = (
    "a pydantic.BaseModel configuration (ConfigTreeWidget), a torch.nn.Module "
    "(ModuleTableWidget), a ModelCapture (SnapshotTableWidget), or a "
    "VinOfflineStoreConfig / path of a store directory (StoreDashboardWidget)"
)


# A health record names module paths but holds no model, and the health view's rows are
# the model's modules: the widget needs both, so show() says how to build it.
_HEALTH_RECORDS = {"ActivationStats": "stats", "ModelDiff": "diff", "NonFiniteOrigin": "origin"}


def _store_dashboard(store: Any, **kwargs: Any) -> Any:
    from vinlens.widgets.store_dashboard import StoreDashboardWidget

    return StoreDashboardWidget(store, **kwargs)


def show(obj: Any, **kwargs: Any) -> Any:
    """Return the widget for ``obj``; keyword arguments go to that widget.

    - a ``VinOfflineStoreConfig``, or a ``str``/``PathLike`` naming a store directory:
      ``StoreDashboardWidget``
    - any other ``pydantic.BaseModel``: ``ConfigTreeWidget``
    - a ``torch.nn.Module``: ``ModuleTableWidget``
    - a ``ModelCapture`` (after its context exited): ``SnapshotTableWidget``, a read-only
      snapshot browser (use ``SnapshotBrowserWidget(model, run)`` to capture from the UI)

    A health record (``ActivationStats``, ``ModelDiff``, ``NonFiniteOrigin``) is not
    enough on its own: the health view lays it over the model's module table, so
    ``show`` raises a ``TypeError`` that names ``ModelHealthWidget(model, <arg>=record)``.

    Raises:
        FileNotFoundError: a path that is not an existing directory.
        TypeError: a health record without its model, or anything else, naming its type
            and what is accepted.
    """
    from pydantic import BaseModel
    from torch import nn

    from vinlens import health
    from vinlens.model_inspection import ModelCapture
    from vinlens.store.format import VinOfflineStoreConfig

    if isinstance(obj, VinOfflineStoreConfig):
        return _store_dashboard(obj, **kwargs)
    if isinstance(obj, str | os.PathLike):
        path = Path(obj).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"show() got the path {str(obj)!r}, which is not an existing directory; "
                "a path must name a vinlens offline store directory"
            )
        return _store_dashboard(path, **kwargs)
    if isinstance(obj, BaseModel):
        from vinlens.widgets.config_tree import ConfigTreeWidget

        return ConfigTreeWidget(obj, **kwargs)
    if isinstance(obj, nn.Module):
        from vinlens.widgets.module_table import ModuleTableWidget

        return ModuleTableWidget(obj, **kwargs)
    if isinstance(obj, ModelCapture):
        from vinlens.widgets.snapshot_browser import SnapshotTableWidget

        return SnapshotTableWidget(obj, **kwargs)
    for name, argument in _HEALTH_RECORDS.items():
        if isinstance(obj, getattr(health, name)):
            raise TypeError(
                f"vinlens.show() cannot show a {name} on its own: the model health view "
                "shows it over the model's module table, which the record does not hold; "
                f"use vinlens.widgets.ModelHealthWidget(model, {argument}=record) with the "
                "model it was computed on"
            )
    raise TypeError(
        f"vinlens.show() cannot show a {type(obj).__module__}.{type(obj).__qualname__}; "
        f"it accepts {ACCEPTED}"
    )
