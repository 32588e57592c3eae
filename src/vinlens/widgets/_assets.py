"""Built front-end files (``static/``), found when a widget is created, not at import."""

from __future__ import annotations

import threading
from pathlib import Path

__all__ = ["STATIC_DIR", "WidgetAsset", "widget_asset"]

STATIC_DIR = Path(__file__).parent / "static"


class WidgetAsset:
    """A built front-end file (``static/<name>``), looked up when a widget is created.

    Importing :mod:`vinlens.widgets` never needs the bundle, so a fresh clone imports
    (and its engines, CLI and tests run) before ``npm run build``; creating a widget
    without the bundle is a clear error naming the missing file. The file's contents
    object is made once per asset and shared by every widget of that class, so with
    ``ANYWIDGET_HMR=1`` one watcher per file pushes rebuilt code to every live view.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._contents: object | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return STATIC_DIR / self.name

    def resolve(self) -> object:
        """What anywidget takes as ``_esm``/``_css``; FileNotFoundError when not built."""
        with self._lock:
            if self._contents is None:
                path = self.path
                if not path.is_file():
                    raise FileNotFoundError(
                        f"vinlens front-end bundle {path} is missing; build it with "
                        "`npm run build` in the vinlens source tree (scripts/setup.sh does this)"
                    )
                self._contents = _file_contents(path)
            return self._contents

    def __repr__(self) -> str:
        return f"WidgetAsset({self.name!r})"


def _file_contents(path: Path) -> object:
    """anywidget's own file object (it hot-reloads under ANYWIDGET_HMR=1), else the text."""
    try:
        from anywidget._util import try_file_contents
    except ImportError:  # an anywidget that moved its helper: no hot reload, same code
        return path.read_text(encoding="utf-8")
    return try_file_contents(path) or path.read_text(encoding="utf-8")


def widget_asset(name: str) -> WidgetAsset:
    """The built front-end file ``static/<name>``, looked up when a widget is created."""
    return WidgetAsset(name)
