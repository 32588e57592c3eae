"""Construction-free walks of a Pydantic configuration tree (:func:`inspect_config`).

The walk reads current field values and ``target_type`` and never calls
``setup_target``, so a configuration whose target is expensive (or broken) to
build can still be described.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel

from vinlens.model_inspection._naming import ROOT_PATH, _qualified_type_name

__all__ = ["ConfigFieldSpec", "ConfigValue", "ModelStructureSpec", "inspect_config"]

#: What :attr:`ConfigFieldSpec.value` holds: a scalar, an enum member, or a type marker string.
ConfigValue: TypeAlias = bool | int | float | str | enum.Enum | None


@dataclass(frozen=True)
class ConfigFieldSpec:
    """One field observed in a construction-free configuration walk.

    Attributes:
        path: Field-name path from the root; sequence positions are decimal strings.
        declared_type: Human-readable annotation declared by the field's Pydantic model.
        configured_type: Fully qualified runtime type of the currently configured value.
        value: Scalar or enum value; other values use a qualified type marker such as
            ``"<builtins.dict>"`` (a class value is marked ``"<class pkg.mod.Name>"``).
    """

    path: tuple[str, ...]
    declared_type: str
    configured_type: str
    value: ConfigValue


@dataclass(frozen=True)
class ModelStructureSpec:
    """Construction-free description of one model configuration tree.

    Repeated inspection of an unchanged configuration returns equal frozen
    records. Each call creates a new record and never calls ``setup_target``.

    Attributes:
        config_type: Fully qualified type of the inspected root Pydantic model.
        target_type: Fully qualified root ``target_type``, or None when absent.
        fields: Depth-first field records in declaration and sequence-index order.
    """

    config_type: str
    target_type: str | None
    fields: tuple[ConfigFieldSpec, ...]


def _short_type_name(cls: type) -> str:
    """Builtins by bare name, everything else fully qualified (for annotations)."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return _qualified_type_name(cls)


def _format_annotation(annotation: object) -> str:
    """Render a field annotation the way a person would write it."""
    if annotation is None or annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    if annotation is Ellipsis:
        return "..."
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _format_annotation(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_format_annotation(arg) for arg in args)
    if origin is Literal:
        return "Literal[" + ", ".join(repr(arg) for arg in args) + "]"
    if origin is not None:
        base = _format_annotation(origin)
        if not args:
            return base
        return f"{base}[{', '.join(_format_annotation(arg) for arg in args)}]"
    if isinstance(annotation, type):
        return _short_type_name(annotation)
    if isinstance(annotation, typing.TypeVar):
        return annotation.__name__
    if isinstance(annotation, typing.ForwardRef):
        return annotation.__forward_arg__
    if isinstance(annotation, list):  # Callable[[A, B], R] argument lists
        return "[" + ", ".join(_format_annotation(arg) for arg in annotation) + "]"
    return repr(annotation).replace("typing.", "")


def _type_marker(value: object) -> str:
    """Stand-in for a value that is not a scalar: its qualified type (or class) name."""
    if isinstance(value, type):
        return f"<class {_qualified_type_name(value)}>"
    return f"<{_qualified_type_name(type(value))}>"


def _qualified_target(target: object) -> str | None:
    """Fully qualified name of a config's ``target_type`` without importing or calling it."""
    if target is None:
        return None
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return _type_marker(target)


# --------------------------------------------------------------------------- inspect_config

_SCALAR_TYPES = (bool, int, float, str)


def _config_value(value: object) -> ConfigValue:
    if value is None or isinstance(value, enum.Enum):
        return value
    if isinstance(value, _SCALAR_TYPES):
        return value
    return _type_marker(value)


def _sequence_element_annotation(annotation: object, index: int) -> object:
    """The annotation an element at ``index`` of a sequence field was declared with."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _sequence_element_annotation(args[0], index)
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            inner = _sequence_element_annotation(arg, index)
            if inner is not Any:
                return inner
        return Any
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
        return args[index] if index < len(args) else Any
    if isinstance(origin, type) and issubclass(origin, Sequence) and args:
        return args[0]
    return Any


# (path, declared annotation, value); annotations are formatted only when a record is made.
_ConfigItem: TypeAlias = tuple[tuple[str, ...], object, object]
_EXTRA_FIELD = object()  # marks ``extra="allow"`` values, which have no declared annotation


def _model_items(config: BaseModel, path: tuple[str, ...]) -> Iterator[_ConfigItem]:
    for name, info in type(config).model_fields.items():
        yield (*path, name), info.annotation, getattr(config, name)
    extra = config.model_extra
    if extra:
        for name, value in extra.items():
            yield (*path, name), _EXTRA_FIELD, value


def _sequence_items(
    sequence: Sequence[object], path: tuple[str, ...], annotation: object
) -> Iterator[_ConfigItem]:
    for index, element in enumerate(sequence):
        if isinstance(element, BaseModel):
            yield (*path, str(index)), _sequence_element_annotation(annotation, index), element


def inspect_config(config: BaseModel) -> ModelStructureSpec:
    """Describe a Pydantic configuration tree without constructing its target.

    The walk records every root field, then descends depth-first (pre-order)
    into nested Pydantic models and Pydantic models held directly in lists and
    tuples. Mappings, ordinary dataclasses, and arbitrary structured values are
    represented by their configured type and are not traversed. Fields allowed
    by ``extra="allow"`` follow the declared ones with declared type ``"<extra>"``.

    Args:
        config: Root Pydantic configuration. Inspection reads current field values and
            ``target_type`` but never calls ``setup_target``.

    Returns:
        Frozen structure metadata ordered by Pydantic field declaration and sequence index.
        An unchanged configuration produces equal records on repeated calls.

    Raises:
        TypeError: ``config`` is not a Pydantic model instance.
        ValueError: the configuration contains itself (a reference cycle), naming the path.
    """
    if not isinstance(config, BaseModel):
        raise TypeError(
            "inspect_config expects a pydantic.BaseModel instance, "
            f"got {_qualified_type_name(type(config))}"
        )
    records: list[ConfigFieldSpec] = []
    # An explicit stack (not recursion) so deep configs never hit RecursionError. Models on
    # the current branch are remembered with their path, so a cycle is named, not followed.
    stack: list[tuple[Iterator[_ConfigItem], int | None]] = [(_model_items(config, ()), id(config))]
    open_models: dict[int, tuple[str, ...]] = {id(config): ()}
    while stack:
        items, owner_id = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            if owner_id is not None:
                open_models.pop(owner_id, None)
            continue
        path, annotation, value = item
        declared = "<extra>" if annotation is _EXTRA_FIELD else _format_annotation(annotation)
        configured = _qualified_type_name(type(value))
        records.append(ConfigFieldSpec(path, declared, configured, _config_value(value)))
        if isinstance(value, BaseModel):
            if id(value) in open_models:
                where = ".".join(open_models[id(value)]) or ROOT_PATH
                raise ValueError(
                    f"configuration is self-referencing: field {'.'.join(path)!r} refers back "
                    f"to its ancestor {where!r} ({configured}); inspect_config needs a tree"
                )
            open_models[id(value)] = path
            stack.append((_model_items(value, path), id(value)))
        elif isinstance(value, (list, tuple)) and any(isinstance(e, BaseModel) for e in value):
            stack.append((_sequence_items(value, path, annotation), None))
    return ModelStructureSpec(
        config_type=_qualified_type_name(type(config)),
        target_type=_qualified_target(getattr(config, "target_type", None)),
        fields=tuple(records),
    )
