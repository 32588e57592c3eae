"""vinlens: look inside multi-camera VIN models and their offline training stores from a notebook.

Engines (no UI imports): :mod:`vinlens.model_inspection`, :mod:`vinlens.store`,
:mod:`vinlens.attribution`. Widgets live in :mod:`vinlens.widgets`.
"""

from __future__ import annotations

from typing import Any

from vinlens.errors import VinlensError

__version__ = "0.1.0"

__all__ = ["VinlensError", "__version__", "show"]


def show(obj: Any, **kwargs: Any) -> Any:
    """Return the widget that fits ``obj`` (a config, a model, a capture or a store)."""
    from vinlens.widgets import show as _show

    return _show(obj, **kwargs)
