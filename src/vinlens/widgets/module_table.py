"""ModuleTableWidget: every registered module of a constructed model, in a virtualized table.

The table crosses to the browser once, as a binary columnar payload (``encode_table``):
one string column of paths and typed numeric columns, plus the tree structure (parent,
depth, end of subtree) so the browser can collapse subtrees and select a subtree without
parsing 50,000 paths. Module types repeat a lot, so they cross as small integer codes into
a list of distinct type names.

The selection is the synced ``selected_paths`` traitlet: Python can set it (unknown paths
are an error naming them), the browser can change it (unknown or malformed entries sent
by a browser are dropped and reported in the widget, never raised in the kernel).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import traitlets
from torch import nn

from vinlens.model_inspection import ModuleTree, inspect_model, module_tree
from vinlens.widgets._base import BrowserSafeState, TableExport, command, widget_asset
from vinlens.widgets._payload import encode_table
from vinlens.widgets._selection import ModuleSelection, SelectionLink, link_selection

__all__ = ["ModuleTableState", "ModuleTableWidget", "module_table_payload"]


def module_table_payload(
    metadata: Any, *, tree: ModuleTree | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(table payload, summary) for a ``ModelMetadata`` record.

    The tree rules (parent, depth, subtree range, subtree sums) are the engine's
    :func:`~vinlens.model_inspection.module_tree`; this only encodes them.
    """
    modules = metadata.modules
    n = len(modules)
    tree = module_tree(metadata) if tree is None else tree
    types = sorted({m.module_type for m in modules})
    type_code = {name: code for code, name in enumerate(types)}
    table = encode_table(
        {
            "path": list(tree.paths),
            "type": np.fromiter((type_code[m.module_type] for m in modules), np.int32, n),
            # int64 counts cross as int32 when they fit, else float64 (see _payload)
            "direct_parameters": np.fromiter((m.direct_parameters for m in modules), np.int64, n),
            "subtree_parameters": np.asarray(tree.subtree_parameters, dtype=np.int64),
            "trainable_parameters": np.fromiter(
                (m.trainable_parameters for m in modules), np.int64, n
            ),
            "direct_buffers": np.fromiter((m.direct_buffers for m in modules), np.int64, n),
            "training": np.fromiter((m.training for m in modules), np.bool_, n),
            "parent": np.asarray(tree.parent, dtype=np.int32),
            "depth": np.asarray(tree.depth, dtype=np.int32),
            "subtree_end": np.asarray(tree.subtree_end, dtype=np.int32),
        }
    )
    summary = {
        "model_type": metadata.model_type,
        "total_parameters": int(metadata.total_parameters),
        "trainable_parameters": int(metadata.trainable_parameters),
        "total_buffers": int(sum(m.direct_buffers for m in modules)),
        "module_count": n,
        "types": types,
    }
    return table, summary


class ModuleTableState(BrowserSafeState):
    """Traitlets and selection rules of a module table; shared with the snapshot browser."""

    modules = traitlets.Dict().tag(sync=True)
    model_summary = traitlets.Dict().tag(sync=True)
    selected_paths = traitlets.List(traitlets.Any()).tag(sync=True)
    tree_view = traitlets.Bool(True).tag(sync=True)

    selection: ModuleSelection
    _selection_link: SelectionLink | None = None

    def _use_selection(self, selection: ModuleSelection | None) -> None:
        """Share ``selection`` (or a new one of this widget's own) with ``selected_paths``.

        Paths of the shared selection that this model does not have are left out of
        ``selected_paths`` and kept in the selection.
        """
        if self._selection_link is not None:
            self._selection_link.unlink()
        self.selection = ModuleSelection() if selection is None else selection
        self._selection_link = link_selection(
            self.selection, self, "selected_paths", known=lambda p: p in self._path_index
        )

    def _set_metadata(self, metadata: Any, *, send_table: bool = True) -> None:
        self._metadata = metadata
        self._path_index: dict[str, int] = {m.path: i for i, m in enumerate(metadata.modules)}
        self._tree: ModuleTree = module_tree(metadata)
        table, summary = module_table_payload(metadata, tree=self._tree) if send_table else ({}, {})
        with self.hold_sync():
            self.model_summary = summary  # before the table: the browser reads both on change
            self.modules = table
            self.selected_paths = [p for p in self.selected_paths if p in self._path_index]

    @traitlets.validate("selected_paths")
    def _validate_selected_paths(self, proposal: Mapping[str, Any]) -> list[str]:
        value = proposal["value"]
        index: dict[str, int] = getattr(self, "_path_index", {})
        chosen = [p for p in value if isinstance(p, str) and p in index]
        rejected = [p for p in value if not (isinstance(p, str) and p in index)]
        if rejected:
            message = _unknown_paths_message(rejected, index)
            if not self._from_browser("selected_paths"):
                raise traitlets.TraitError(message)
            self._report_error("", f"ignored a selection from the browser: {message}")
        return sorted(set(chosen), key=index.__getitem__)

    def subtree_paths(self, path: str) -> list[str]:
        """``path`` and every module registered below it, in table order."""
        if path not in self._path_index:
            raise KeyError(_unknown_paths_message([path], self._path_index))
        return list(self._tree.subtree_paths(path))

    def select_subtree(self, path: str) -> None:
        """Add ``path`` and all modules below it to :attr:`selected_paths`."""
        self.selected_paths = [*self.selected_paths, *self.subtree_paths(path)]


def _unknown_paths_message(rejected: Sequence[Any], index: Mapping[str, int]) -> str:
    shown = ", ".join(repr(p) for p in rejected[:5]) + (" ..." if len(rejected) > 5 else "")
    message = f"unknown module path(s) {shown}; expected registered paths of the model"
    first = next((p for p in rejected if isinstance(p, str)), None)
    if first is not None:
        close = difflib.get_close_matches(first, list(index), n=3)
        if close:
            message += f" (did you mean {', '.join(repr(c) for c in close)}?)"
    return message


class ModuleTableWidget(ModuleTableState, TableExport):
    """The registered modules of ``model``: tree or flat, sortable, filterable, selectable.

    ``selected_paths`` is synced both ways with the browser and with ``selection``, a
    :class:`~vinlens.widgets.ModuleSelection` that other widgets (snapshot browser, health
    view, attribution viewer) can share, so a module picked in one is picked in all; by
    default the table has a selection of its own. ``refresh()`` re-inspects the model,
    e.g. after ``model.eval()``.
    """

    _esm = widget_asset("module_table.js")
    _css = widget_asset("module_table.css")

    def __init__(
        self,
        model: nn.Module,
        *,
        selected_paths: Iterable[str] = (),
        tree_view: bool = True,
        selection: ModuleSelection | None = None,
        **kwargs: Any,
    ) -> None:
        metadata = inspect_model(model)
        super().__init__(tree_view=tree_view, **kwargs)
        self.model = model
        self._set_metadata(metadata)
        self.selected_paths = list(selected_paths)
        self._use_selection(selection)

    @property
    def metadata(self) -> Any:
        """The ``ModelMetadata`` record the table shows."""
        return self._metadata

    def refresh(self) -> None:
        """Re-inspect the model (training flags, parameters) and update the table."""
        self._set_metadata(inspect_model(self.model))
        self.error = ""
        self.status = "idle"

    @command("refresh")
    def _refresh_command(self, args: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
        self.refresh()
        return {"module_count": len(self._metadata.modules)}

    def _export_records(self) -> Any:
        return self._metadata.modules
