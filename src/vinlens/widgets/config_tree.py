"""ConfigTreeWidget: a Pydantic configuration as a collapsible tree of ``inspect_config`` records.

The engine walks the configuration without constructing its target; this widget only
turns the records into what the browser shows. A configuration has tens to hundreds of
fields, so they cross as small JSON-safe dicts. Each field also carries ``value_text``,
the value as Python would write it (strings quoted, enums as ``Name.MEMBER``, type
markers bare), because the browser cannot tell a string ``"1"`` from the integer 1 or a
marker from a string once both are JSON.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import traitlets
from pydantic import BaseModel

from vinlens.widgets._base import BrowserSafeState, TableExport, command, widget_asset
from vinlens.widgets._payload import to_jsonable

__all__ = ["ConfigTreeWidget", "config_tree_payload"]


def _value_view(value: Any, configured_type: str) -> tuple[str, str]:
    """(kind, text) of a field value: kind is none, bool, number, string, enum or marker."""
    if value is None:
        return "none", "None"
    if isinstance(value, enum.Enum):
        return "enum", f"{type(value).__name__}.{value.name}"
    if isinstance(value, bool):
        return "bool", repr(value)
    if isinstance(value, int):
        return "number", repr(value)
    if isinstance(value, float):
        return "number", repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, str) and configured_type != "builtins.str":
        return "marker", value  # the engine's "<pkg.Type>" stand-in for a structured value
    return "string", repr(value)


def config_tree_payload(spec: Any) -> dict[str, Any]:
    """The ``spec`` traitlet for a ``ModelStructureSpec`` record."""
    fields = []
    for record in spec.fields:
        kind, text = _value_view(record.value, record.configured_type)
        fields.append(
            {
                "path": list(record.path),
                "declared_type": record.declared_type,
                "configured_type": record.configured_type,
                "value": to_jsonable(record.value),
                "value_kind": kind,
                "value_text": text,
            }
        )
    return {"config_type": spec.config_type, "target_type": spec.target_type, "fields": fields}


class ConfigTreeWidget(BrowserSafeState, TableExport):
    """Show ``config`` (a ``pydantic.BaseModel``) as a searchable tree; nothing is constructed.

    ``query`` is the search text (synced both ways). ``refresh()`` re-inspects the
    configuration after it was changed in place.
    """

    _esm = widget_asset("config_tree.js")
    _css = widget_asset("config_tree.css")

    spec = traitlets.Dict().tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)

    def __init__(self, config: BaseModel, *, query: str = "", **kwargs: Any) -> None:
        if not isinstance(config, BaseModel):
            raise TypeError(
                "ConfigTreeWidget expects a pydantic.BaseModel instance, got "
                f"{type(config).__module__}.{type(config).__qualname__}"
            )
        super().__init__(query=query, **kwargs)
        self.config = config
        self.refresh()

    @property
    def structure(self) -> Any:
        """The ``ModelStructureSpec`` record shown."""
        return self._structure

    def refresh(self) -> None:
        """Re-inspect the configuration and update the tree."""
        from vinlens.model_inspection import inspect_config

        self._structure = inspect_config(self.config)
        self.spec = config_tree_payload(self._structure)

    @command("refresh")
    def _refresh_command(self, args: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
        self.refresh()
        return {"field_count": len(self._structure.fields)}

    def _export_records(self) -> Any:
        return self._structure.fields
