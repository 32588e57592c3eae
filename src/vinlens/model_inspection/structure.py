"""Registered state of a constructed model, read without a forward pass (:func:`inspect_model`)."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parameter import is_lazy

from vinlens.model_inspection._naming import _TYPE_NAMES, ROOT_PATH, _qualified_type_name

__all__ = ["ModelMetadata", "ModuleMetadata", "ModuleTree", "inspect_model", "module_tree"]


@dataclass(frozen=True, slots=True)
class ModuleMetadata:
    """Static metadata for one registered module in a constructed model.

    Attributes:
        path: Registration path from the model root, represented as ``"<root>"`` at the root.
        module_type: Fully qualified runtime type of the registered module instance.
        direct_parameters: Elements in initialized parameters registered directly on this module.
        trainable_parameters: Elements in initialized, gradient-enabled parameters directly on
            this module.
        direct_buffers: Elements in initialized buffers registered directly on this module.
        training: The module's training flag at inspection time.
    """

    path: str
    module_type: str
    direct_parameters: int
    trainable_parameters: int
    direct_buffers: int
    training: bool


@dataclass(frozen=True)
class ModelMetadata:
    """Registered-module metadata for an already constructed model.

    Attributes:
        model_type: Fully qualified runtime type of the inspected model.
        total_parameters: Elements in all initialized parameters reachable from the model
            (a parameter shared by several modules counts once).
        trainable_parameters: Elements in all initialized, gradient-enabled reachable parameters.
        modules: Unique registered modules in traversal order, including the root.
    """

    model_type: str
    total_parameters: int
    trainable_parameters: int
    modules: tuple[ModuleMetadata, ...]


# --------------------------------------------------------------------------- inspect_model


def _initialized_numel(tensor: torch.Tensor | None) -> int:
    """Elements of registered state; lazy placeholders have no shape yet and count zero."""
    if tensor is None or is_lazy(tensor):
        return 0
    return tensor.numel()


_MODULE_METADATA_SETTERS: tuple[Callable[[ModuleMetadata, Any], None], ...] = tuple(
    getattr(ModuleMetadata, field.name).__set__ for field in dataclasses.fields(ModuleMetadata)
)


def _registered_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())``, walked without a chain of nested generators.

    Same order and de-duplication as ``named_modules`` (pre-order, first path of
    a shared instance wins, ``None`` children skipped) at about half the cost on
    deep models. A module class that overrides ``named_modules`` gets its own
    implementation, by falling back to it for the whole model.
    """
    default_walk = nn.Module.named_modules
    plain_types: set[type] = set()
    found: list[tuple[str, nn.Module]] = []
    visited: set[int] = set()
    stack: list[tuple[str, nn.Module]] = [("", model)]
    while stack:
        name, module = stack.pop()
        if id(module) in visited:
            continue
        visited.add(id(module))
        cls = type(module)
        if cls not in plain_types:
            if getattr(cls, "named_modules", None) is not default_walk:
                return list(model.named_modules())
            plain_types.add(cls)
        found.append((name, module))
        children: dict[str, nn.Module | None] = module.__dict__["_modules"]
        if children:
            prefix = name + "." if name else ""
            stack.extend(
                [
                    (prefix + key, child)
                    for key, child in reversed(children.items())
                    if child is not None
                ]
            )
    return found


def inspect_model(model: nn.Module) -> ModelMetadata:
    """Describe registered PyTorch state without running a forward pass.

    Reads each module's own ``_parameters`` and ``_buffers`` tables, which is
    what keeps this fast on 10,000-module models and free of side effects: no
    property, hook or lazy initializer runs, and meta-device models work
    because only ``numel`` is asked.

    Args:
        model: Already constructed module. Inspection does not change training mode,
            initialize lazy state, move devices, or execute hooks.

    Returns:
        Frozen metadata in ``named_modules`` registration order. Model totals cover
        recursively reachable parameters (a parameter shared by several modules, such as
        tied embeddings, counts once), while each module record counts only state registered
        directly on that module. Uninitialized lazy parameters and buffers contribute zero
        elements; already initialized state on the same lazy module is still counted.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"inspect_model expects a torch.nn.Module, got {_qualified_type_name(type(model))}"
        )
    # The walk allocates a few objects per module and creates no reference cycles, yet
    # on a 10,000-module model those allocations trigger enough cyclic-GC passes over
    # the model's own objects to nearly double the run time; pause the collector.
    collect_after = gc.isenabled()
    gc.disable()
    try:
        return _inspect_registered_state(model)
    finally:
        if collect_after:
            gc.enable()


def _inspect_registered_state(model: nn.Module) -> ModelMetadata:
    """The body of :func:`inspect_model`, run with the cyclic collector paused."""
    parameter_type = nn.Parameter
    seen_parameters: set[int] = set()
    remember = seen_parameters.add
    total = trainable_total = 0
    records: list[ModuleMetadata] = []
    append = records.append
    new_record = object.__new__
    type_names = _TYPE_NAMES
    set_path, set_type, set_direct, set_trainable, set_buffers, set_training = (
        _MODULE_METADATA_SETTERS
    )
    # Hot loop on 10,000-module models. nn.Module defines __getattr__, which makes every
    # attribute read take CPython's slow path, so the state tables are read from the
    # instance dict in one go, and the lazy check runs only for unusual parameter types.
    for name, module in _registered_modules(model):
        state = module.__dict__
        direct = trainable = 0
        for parameter in state["_parameters"].values():
            if parameter is None or (type(parameter) is not parameter_type and is_lazy(parameter)):
                continue
            count = parameter.numel()
            requires_grad = parameter.requires_grad
            direct += count
            if requires_grad:
                trainable += count
            key = id(parameter)
            if key not in seen_parameters:
                remember(key)
                total += count
                if requires_grad:
                    trainable_total += count
        buffers = 0
        buffer_table = state["_buffers"]
        if buffer_table:
            for buffer in buffer_table.values():
                buffers += _initialized_numel(buffer)
        # Equal to ModuleMetadata(...), built through the slot descriptors: the frozen
        # __init__ pays an object.__setattr__ call per field, which rivals the rest of
        # this loop on a 10,000-module model (tests compare both constructions).
        cls = type(module)
        record = new_record(ModuleMetadata)
        set_path(record, name or ROOT_PATH)
        set_type(record, type_names.get(cls) or _qualified_type_name(cls))
        set_direct(record, direct)
        set_trainable(record, trainable)
        set_buffers(record, buffers)
        set_training(record, module.training)
        append(record)
    return ModelMetadata(
        model_type=_qualified_type_name(type(model)),
        total_parameters=total,
        trainable_parameters=trainable_total,
        modules=tuple(records),
    )


# --------------------------------------------------------------------------- module_tree


@dataclass(frozen=True)
class ModuleTree:
    """The tree of a :class:`ModelMetadata`'s modules, one entry per row of ``modules``.

    Attributes:
        paths: Module paths in the record's (``named_modules`` pre-order) order.
        parent: Row of each module's parent; ``-1`` for the root (and for every top-level
            module when the record has no root row).
        depth: Registration depth; the root is 0, ``"a.b"`` is 2 below a root row.
        subtree_end: End of each module's subtree: rows ``[i, subtree_end[i])`` are the
            module and everything registered below it.
        subtree_parameters: ``direct_parameters`` summed over each subtree (a parameter
            registered directly on two modules, as tied weights are, counts under both,
            so the root's sum can exceed ``total_parameters``).
    """

    paths: tuple[str, ...]
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    subtree_end: tuple[int, ...]
    subtree_parameters: tuple[int, ...]

    @cached_property
    def _rows(self) -> dict[str, int]:
        return {path: i for i, path in enumerate(self.paths)}

    def row(self, path: str) -> int:
        """The row of ``path``; KeyError naming it when the model has no such module."""
        try:
            return self._rows[path]
        except KeyError:
            raise KeyError(f"no module {path!r} in this model") from None

    def subtree_paths(self, path: str) -> tuple[str, ...]:
        """``path`` and every module registered below it, in row order."""
        start = self.row(path)
        return self.paths[start : self.subtree_end[start]]


def module_tree(metadata: ModelMetadata) -> ModuleTree:
    """Parent, depth, subtree range and subtree parameter total of every module row.

    Parents come from the paths (``"a.b"``'s parent is ``"a"``; a module whose parent
    path is not a row hangs under the root), so the ranges hold for any record, and
    ``subtree_end`` follows the record's order: in ``inspect_model``'s pre-order a
    subtree is a contiguous range of rows.

    Raises:
        TypeError: ``metadata`` is not a :class:`ModelMetadata`.
    """
    if not isinstance(metadata, ModelMetadata):
        raise TypeError(
            f"module_tree expects a ModelMetadata (from inspect_model), got "
            f"{_qualified_type_name(type(metadata))}"
        )
    modules = metadata.modules
    n = len(modules)
    paths = tuple(m.path for m in modules)
    index = {path: i for i, path in enumerate(paths)}
    root = index.get(ROOT_PATH, -1)
    parent = [-1] * n
    depth = [0] * n
    below_root = 1 if root >= 0 else 0
    for i, path in enumerate(paths):
        if path == ROOT_PATH:
            continue
        head, dot, _ = path.rpartition(".")
        parent[i] = index.get(head, root) if dot else root
        depth[i] = path.count(".") + below_root
    subtree_end = list(range(1, n + 1))
    open_rows: list[int] = []  # ancestors of the current row, innermost last
    for i in range(n):
        while open_rows and open_rows[-1] != parent[i]:
            subtree_end[open_rows.pop()] = i
        open_rows.append(i)
    for i in open_rows:
        subtree_end[i] = n
    direct = np.fromiter((m.direct_parameters for m in modules), np.int64, n)
    # A subtree is a contiguous row range, so its total is a difference of prefix sums.
    prefix = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(direct, out=prefix[1:])
    ends = np.asarray(subtree_end, dtype=np.int64)
    sums = prefix[ends] - prefix[:n] if n else np.zeros(0, dtype=np.int64)
    return ModuleTree(
        paths=paths,
        parent=tuple(parent),
        depth=tuple(depth),
        subtree_end=tuple(subtree_end),
        subtree_parameters=tuple(sums.tolist()),
    )
