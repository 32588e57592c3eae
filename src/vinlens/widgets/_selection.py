"""One module selection shared by several widgets: a module picked anywhere is picked everywhere.

:class:`ModuleSelection` holds the picked module paths. A widget links one of its
traitlets to it with :func:`link_selection`: a change of the widget's trait (a click in
its browser view, or Python) becomes the shared ``paths``, and a change of ``paths``
reaches every other linked widget, each taking only the paths it knows. A widget that
cannot show a path (another model's module, a layer it cannot attribute) keeps the shared
selection as it is rather than writing its narrower view of it back, so widgets of
different scope can share one selection without erasing each other's picks.

Typical use::

    picked = ModuleSelection()
    table = ModuleTableWidget(model, selection=picked)
    health = ModelHealthWidget(model, run, selection=picked)
    picked.paths = ["encoder.0"]  # both widgets show encoder.0 selected

A widget with a one-path trait (the attribution viewer's ``layer``) links with
:func:`link_single_path`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import traitlets

__all__ = ["NO_CHANGE", "ModuleSelection", "SelectionLink", "link_selection", "link_single_path"]


class _NoChange:
    def __repr__(self) -> str:
        return "NO_CHANGE"


#: Returned by a ``to_owner`` converter when the widget should keep its current value.
NO_CHANGE: Any = _NoChange()


class ModuleSelection(traitlets.HasTraits):
    """The module paths picked in any of the widgets linked to it (see :func:`link_selection`).

    ``paths`` is a plain list of registered module paths (``"<root>"`` for the model
    itself), in the order the last widget that changed it reported them.
    """

    paths = traitlets.List(traitlets.Unicode())

    def __init__(self, paths: Iterable[str] = ()) -> None:
        if isinstance(paths, str):
            raise TypeError(f"paths must be a list of module paths, got the string {paths!r}")
        super().__init__(paths=list(paths))

    def clear(self) -> None:
        """Pick nothing."""
        self.paths = []

    def __repr__(self) -> str:
        return f"ModuleSelection(paths={self.paths!r})"


def _require_selection(selection: Any) -> ModuleSelection:
    if not isinstance(selection, ModuleSelection):
        raise TypeError(
            "selection must be a vinlens.widgets.ModuleSelection, got "
            f"{type(selection).__module__}.{type(selection).__qualname__}"
        )
    return selection


class SelectionLink:
    """A two-way link between a :class:`ModuleSelection` and one trait of one widget.

    ``to_owner(paths)`` turns the shared paths into the trait's value (or
    :data:`NO_CHANGE`); ``from_owner(value)`` turns the trait's value into paths. A change
    that one side makes is not echoed back to it, so a widget that narrows the shared
    paths to those it knows never erases the others.
    """

    def __init__(
        self,
        selection: ModuleSelection,
        owner: traitlets.HasTraits,
        name: str,
        *,
        to_owner: Callable[[list[str]], Any],
        from_owner: Callable[[Any], list[str]],
    ) -> None:
        self.selection = _require_selection(selection)
        self.owner = owner
        self.name = name
        self._to_owner = to_owner
        self._from_owner = from_owner
        self._syncing = False
        # The first link of a fresh selection seeds it from the widget; later links adopt it.
        if selection.paths:
            self._push_to_owner(list(selection.paths))
        else:
            initial = from_owner(getattr(owner, name))
            if initial:
                self._push_to_selection(initial)
        selection.observe(self._on_selection, "paths")
        owner.observe(self._on_owner, name)

    def _on_selection(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self._push_to_owner(list(change["new"]))

    def _on_owner(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self._push_to_selection(self._from_owner(change["new"]))

    def _push_to_owner(self, paths: list[str]) -> None:
        value = self._to_owner(paths)
        if value is NO_CHANGE:
            return
        self._syncing = True
        try:
            setattr(self.owner, self.name, value)
        finally:
            self._syncing = False

    def _push_to_selection(self, paths: list[str]) -> None:
        self._syncing = True
        try:
            self.selection.paths = list(paths)
        finally:
            self._syncing = False

    def unlink(self) -> None:
        """Stop syncing (the widget keeps its current value)."""
        self.selection.unobserve(self._on_selection, "paths")
        self.owner.unobserve(self._on_owner, self.name)


def link_selection(
    selection: ModuleSelection,
    owner: traitlets.HasTraits,
    name: str = "selected_paths",
    *,
    known: Callable[[str], bool] | None = None,
) -> SelectionLink:
    """Link a list-of-paths trait (``selected_paths``) of ``owner`` to ``selection``.

    ``known(path)`` says which shared paths the widget can show; the others are left
    out of its trait (and stay in the shared selection).
    """

    def to_owner(paths: list[str]) -> list[str]:
        return [p for p in paths if known is None or known(p)]

    def from_owner(value: Any) -> list[str]:
        return [str(p) for p in value or ()]

    return SelectionLink(selection, owner, name, to_owner=to_owner, from_owner=from_owner)


def link_single_path(
    selection: ModuleSelection,
    owner: traitlets.HasTraits,
    name: str,
    *,
    accept: Callable[[str], bool],
    empty: Any = "",
) -> SelectionLink:
    """Link a one-path trait (e.g. an attribution layer) to ``selection``.

    The trait takes the last shared path that ``accept`` allows (the most recent pick
    of a multi-selection); when none is acceptable it keeps its value. Setting the trait
    makes it the whole shared selection, and ``empty`` clears it.
    """

    def to_owner(paths: list[str]) -> Any:
        for path in reversed(paths):
            if accept(path):
                return path
        return NO_CHANGE

    def from_owner(value: Any) -> list[str]:
        return [] if value == empty or value is None else [str(value)]

    return SelectionLink(selection, owner, name, to_owner=to_owner, from_owner=from_owner)
