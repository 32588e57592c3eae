"""Inspect VIN configuration, registered model state, and bounded tensor samples.

The module returns rendering-neutral frozen records. Configuration inspection
walks supported Pydantic structure without constructing its target; model
inspection reads registered state without a forward pass; and numerical capture
is an explicit hook context around the caller's ordinary forward pass. Plotting,
serialization, and interpretation of these records belong to downstream callers.

Three rules shape the implementation:

* Diagnostics must never change what they observe: no mode, device or lazy-state
  changes in :func:`inspect_model`, no ``setup_target`` call in
  :func:`inspect_config`, hooks that return ``None`` in :class:`ModelCapture`.
* Cost must follow the quotas, not the model: a capture copies at most
  ``max_samples_per_tensor`` elements of a tensor by narrowing views down to the
  row-major prefix, so a 256 MiB non-contiguous CUDA activation costs the same
  as a tiny one.
* Cleanup is unconditional: hooks are removed on every exit path, including
  ``KeyboardInterrupt``.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import gc
import itertools
import threading
import types
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import torch
from pydantic import BaseModel
from torch import nn
from torch.nn.parameter import is_lazy
from torch.utils.hooks import RemovableHandle

__all__ = [
    "CaptureLimits",
    "ConfigFieldSpec",
    "ModelCapture",
    "ModelMetadata",
    "ModelStructureSpec",
    "ModuleMetadata",
    "TensorSnapshot",
    "capture_model",
    "inspect_config",
    "inspect_model",
]

_ROOT_PATH = "<root>"

#: Python scalars a tensor sample is converted to.
SampleScalar: TypeAlias = bool | int | float
#: What :attr:`ConfigFieldSpec.value` holds: a scalar, an enum member, or a type marker string.
ConfigValue: TypeAlias = bool | int | float | str | enum.Enum | None
Direction: TypeAlias = Literal["input", "output"]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class CaptureLimits:
    """Positive quotas for one ModelCapture instance.

    Tensor-count and byte quotas are cumulative across every call and context
    entrance made with the instance. Traversal quotas restart for each module
    invocation's combined positional/keyword inputs and separately for its
    output. These limits bound inspected nodes and copied numeric payload; they
    do not bound the source model, source tensors, hook metadata, Python record
    overhead, or total process/device memory.

    Attributes:
        max_tensors: Maximum tensor snapshots retained across the capture instance.
        max_samples_per_tensor: Maximum row-major flattened elements copied from one source tensor.
        max_bytes: Maximum source-dtype bytes copied into samples across the instance.
        max_traversal_nodes: Maximum containers, leaves, and tensors visited in one input or
            output walk.
        max_container_depth: Maximum container edges followed from an input or output root.
    """

    max_tensors: int = 64
    max_samples_per_tensor: int = 32
    max_bytes: int = 16 * 1024
    max_traversal_nodes: int = 4096
    max_container_depth: int = 32

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            # bool is an int subclass, but ``max_tensors=True`` is always a mistake.
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"CaptureLimits.{field.name} must be a positive int, "
                    f"got {type(value).__name__} {value!r}"
                )
            if value <= 0:
                raise ValueError(
                    f"CaptureLimits.{field.name} must be a positive int, got {value!r}"
                )


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


@dataclass(frozen=True)
class TensorSnapshot:
    """Complete source metadata plus a detached, bounded tensor value sample.

    Empty tensors retain their shape with an empty value sample and zero bytes.
    Complex, meta-device, non-strided-layout and quantized tensors are
    metadata-only: their values are not indexed, copied, densified or cast.
    ``sample_omission_reason`` distinguishes these from empty source tensors.
    Records remain compatible with standard dataclass serialization.

    Metadata describes the full tensor at hook time. Only ``values`` is
    truncated: it is a row-major prefix copied to CPU and converted to immutable
    Python scalars, so the snapshot neither aliases source storage nor retains
    its autograd graph.

    Attributes:
        module_path: Registered module path, using ``"<root>"`` for the model root.
        call_index: Zero-based invocation index for module_path in this capture instance.
        direction: Hook side observed; input and output from one call share an index.
        tensor_path: Container path from args/kwargs or the output root, e.g. ``args[0]``,
            ``kwargs['scale']``, ``output['logits'][1]``, ``output.hidden``.
        shape: Complete source-tensor shape at observation time.
        dtype: String form of the source-tensor dtype at observation time.
        device: String form of the source device before the bounded CPU copy.
        numel: Total number of elements in the full source tensor.
        sampled_bytes: Source-dtype bytes represented by values in this snapshot.
        values: Detached CPU scalar prefix bounded by per-tensor and shared quotas.
        sample_omission_reason: Why numeric sampling is unsupported; None for supported/empty
            sources.
    """

    module_path: str
    call_index: int
    direction: Direction
    tensor_path: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    sampled_bytes: int
    values: tuple[SampleScalar, ...]
    sample_omission_reason: str | None = None


# --------------------------------------------------------------------------- naming helpers


_TYPE_NAMES: dict[type, str] = {}


def _qualified_type_name(cls: type) -> str:
    """``module.QualName`` of a class; memoized because model walks ask for the same few types."""
    name = _TYPE_NAMES.get(cls)
    if name is None:
        if len(_TYPE_NAMES) > 4096:  # classes made on the fly must not grow this forever
            _TYPE_NAMES.clear()
        name = _TYPE_NAMES[cls] = f"{cls.__module__}.{cls.__qualname__}"
    return name


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
                where = ".".join(open_models[id(value)]) or _ROOT_PATH
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
        set_path(record, name or _ROOT_PATH)
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


# --------------------------------------------------------------------------- sampling


def _omission_reason(tensor: torch.Tensor) -> str | None:
    """Why a tensor's values are not sampled, or None when a cheap exact prefix exists."""
    if tensor.is_meta:
        return "meta tensor: it has no data to sample"
    if tensor.layout != torch.strided:
        return f"non-strided layout {tensor.layout}: values are not densified"
    if tensor.is_nested:
        return "nested tensor: it has no single row-major order"
    if tensor.is_quantized:
        return f"quantized dtype {tensor.dtype}: values are not dequantized"
    if tensor.is_complex():
        return f"complex dtype {tensor.dtype}: values are not converted"
    return None


def _prefix_block(tensor: torch.Tensor, count: int) -> torch.Tensor:
    """The smallest leading block of ``tensor`` that holds its first ``count`` elements.

    Leading dimensions sit at index 0 while the trailing dimensions alone hold
    ``count`` elements; the first dimension that does not is cut to the rows
    needed. The block is one ``as_strided`` view built from the shape and
    strides (so any layout works: permuted, sliced, expanded) and has fewer than
    ``2 * count`` elements, so nothing proportional to the source is read,
    copied or moved across devices.
    """
    shape = tensor.shape
    dim = len(shape)
    inner = 1
    while dim > 0 and inner < count:
        dim -= 1
        inner *= shape[dim]
    source = tensor.detach()  # no autograd node, whatever the grad mode
    if dim == len(shape):  # count == 1: just the first element
        return source.as_strided((1,), (1,), tensor.storage_offset())
    per_row = inner // shape[dim]
    rows = -(-count // per_row)
    return source.as_strided(
        (rows, *shape[dim + 1 :]), tensor.stride()[dim:], tensor.storage_offset()
    )


def _row_major_prefix(tensor: torch.Tensor, count: int) -> tuple[SampleScalar, ...]:
    """The first ``count`` elements in row-major order as Python scalars.

    ``tolist`` copies only the small block (to CPU first when it lives on a
    device) and yields Python floats for float16/bfloat16/float8, so values can
    never alias the source storage or carry autograd state.
    """
    block = _prefix_block(tensor, count)
    values: Any = block.tolist()
    for _ in range(block.dim() - 1):
        values = list(itertools.chain.from_iterable(values))
    return tuple(values[:count])


def _tensor_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    if not tensor.is_nested:
        return tuple(tensor.shape)
    try:
        return tuple(int(size) for size in tensor.shape)
    except (RuntimeError, TypeError, ValueError):  # jagged sizes have no plain shape
        return ()


# str(dtype) / str(device) per snapshot add up inside hooks; both sets are tiny.
_DTYPE_NAMES: dict[torch.dtype, str] = {}
_DEVICE_NAMES: dict[torch.device, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _device_name(device: torch.device) -> str:
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def _new_snapshot(
    module_path: str,
    call_index: int,
    direction: Direction,
    tensor_path: str,
    tensor: torch.Tensor,
    numel: int,
    sampled_bytes: int,
    values: tuple[SampleScalar, ...],
    reason: str | None,
) -> TensorSnapshot:
    """Build the same record as ``TensorSnapshot(...)`` without eleven frozen ``__setattr__`` calls.

    It runs inside forward hooks, where every microsecond is added to the
    caller's forward; the tests check it against the regular constructor.
    """
    record = object.__new__(TensorSnapshot)
    record.__dict__.update(
        module_path=module_path,
        call_index=call_index,
        direction=direction,
        tensor_path=tensor_path,
        shape=_tensor_shape(tensor),
        dtype=_dtype_name(tensor.dtype),
        device=_device_name(tensor.device),
        numel=numel,
        sampled_bytes=sampled_bytes,
        values=values,
        sample_omission_reason=reason,
    )
    return record


# --------------------------------------------------------------------------- traversal

_WalkItem: TypeAlias = tuple[str, object]


def _key_repr(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def _children(value: object, path: str) -> Iterator[_WalkItem] | None:
    """Lazy (path, child) pairs of a supported container; None for a leaf.

    Lazy so that a 100,000-element list costs only as many steps as the node
    quota allows.
    """
    if isinstance(value, tuple):
        fields = getattr(type(value), "_fields", None)
        if isinstance(fields, tuple):  # namedtuple
            return ((f"{path}.{name}", item) for name, item in zip(fields, value, strict=False))
        return ((f"{path}[{index}]", item) for index, item in enumerate(value))
    if isinstance(value, list):
        return ((f"{path}[{index}]", item) for index, item in enumerate(value))
    if isinstance(value, Mapping):
        return ((f"{path}[{_key_repr(key)}]", item) for key, item in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            (f"{path}.{field.name}", getattr(value, field.name, None))
            for field in dataclasses.fields(value)
        )
    return None


# --------------------------------------------------------------------------- capture


def _compiled_paths(modules: Sequence[tuple[str, nn.Module]]) -> list[str]:
    """Paths of modules wrapped by ``torch.compile`` or compiled in place with ``Module.compile``.

    Checked by name so that this diagnostic never imports ``torch._dynamo`` itself.
    """
    found: list[str] = []
    for name, module in modules:
        cls = type(module)
        wrapped = cls.__name__ == "OptimizedModule" and cls.__module__.startswith("torch._dynamo")
        if wrapped or getattr(module, "_compiled_call_impl", None) is not None:
            found.append(name or _ROOT_PATH)
    return found


class ModelCapture:
    """Capture bounded tensors from registered module instances.

    Enter the context, run the model through its ordinary caller-owned forward,
    and inspect :attr:`snapshots` after exit. Hooks never alter module outputs
    and are removed on both successful and exceptional exits. Inputs are
    sampled by an instance pre-hook before forward can mutate them. At context
    entry, the sampling hook follows existing instance pre-hooks and observes
    their transformations. Hooks added while capture is active may use
    PyTorch's prepend ordering and run on either side. Shared limits may
    truncate either side of an invocation, so snapshots are a bounded trace
    rather than guaranteed input/output pairs. An exceptional forward has no
    output sample; leaving the context still removes every hook, and
    :meth:`close` provides the same idempotent cleanup for manual use.

    ``max_tensors`` and ``max_bytes`` bound retained output records and copied
    numeric payload across the capture instance. ``max_samples_per_tensor``
    bounds each value tuple. ``max_traversal_nodes`` and ``max_container_depth``
    bound each structured input or output walk. They do not impose a
    total-memory limit; the source model and tensors remain owned by the caller
    and metadata/record overhead is additional.

    Args:
        model: Constructed model that owns the registered modules to observe.
        module_paths: Exact registered paths to capture, or None for all paths in
            ``named_modules`` order, including ``"<root>"``.
        limits: Positive quotas, or None for :class:`CaptureLimits` defaults.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        module_paths: Sequence[str] | None = None,
        limits: CaptureLimits | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be a torch.nn.Module, got {_qualified_type_name(type(model))}"
            )
        if limits is None:
            limits = CaptureLimits()
        elif not isinstance(limits, CaptureLimits):
            raise TypeError(
                f"limits must be a CaptureLimits or None, got {_qualified_type_name(type(limits))}"
            )
        self._model = model
        self._limits = limits
        self._module_paths = _normalize_paths(module_paths)
        self._lock = threading.Lock()
        self._snapshots: list[TensorSnapshot] = []
        self._sampled_bytes = 0
        # Set once max_tensors or max_bytes is used up; hooks then return at once.
        self._exhausted = False
        self._call_counts: dict[str, int] = {}
        # Per (thread, path): stack of (call index, id of the args tuple) for calls in flight.
        self._pending: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self._handles: list[RemovableHandle] = []
        self._active = False

    # -- public surface ------------------------------------------------------------------

    @property
    def snapshots(self) -> tuple[TensorSnapshot, ...]:
        """Return a tuple of detached snapshots captured so far."""
        with self._lock:
            return tuple(self._snapshots)

    @property
    def sampled_bytes(self) -> int:
        """Return cumulative source-dtype bytes represented by sampled values."""
        return self._sampled_bytes

    @property
    def active(self) -> bool:
        """Report whether instance hooks are currently registered."""
        return self._active

    @property
    def limits(self) -> CaptureLimits:
        """The quotas this capture enforces."""
        return self._limits

    def close(self) -> None:
        """Remove this capture's hooks and pending calls; repeated calls are safe."""
        handles, self._handles = self._handles, []
        try:
            for handle in handles:
                handle.remove()
        finally:
            with self._lock:
                self._pending.clear()
            self._active = False

    def __enter__(self) -> ModelCapture:
        if self._active:
            raise RuntimeError(
                "this ModelCapture is already active; leave it (or call close()) before entering it again"
            )
        modules = list(self._model.named_modules())
        targets = self._resolve_targets(modules)
        compiled = _compiled_paths(modules)
        if compiled:
            warnings.warn(
                "ModelCapture: the model contains torch.compile'd modules "
                f"({', '.join(compiled[:5])}{', ...' if len(compiled) > 5 else ''}). Hooks added "
                "after the first compiled call may never fire, so snapshots can be missing; "
                "capture the uncompiled module (e.g. `compiled._orig_mod`) instead.",
                RuntimeWarning,
                stacklevel=2,
            )
        self._active = True
        try:
            for label, module in targets:
                self._handles.append(
                    module.register_forward_pre_hook(self._make_pre_hook(label), with_kwargs=True)
                )
                self._handles.append(
                    module.register_forward_hook(self._make_post_hook(label), always_call=True)
                )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ModelCapture(model={_qualified_type_name(type(self._model))}, active={self._active}, "
            f"snapshots={len(self._snapshots)}/{self._limits.max_tensors}, "
            f"sampled_bytes={self._sampled_bytes}/{self._limits.max_bytes})"
        )

    # -- hook registration ---------------------------------------------------------------

    def _resolve_targets(
        self, modules: Sequence[tuple[str, nn.Module]]
    ) -> list[tuple[str, nn.Module]]:
        """(label, module) pairs to hook; unknown paths fail here with suggestions."""
        if self._module_paths is None:
            return [(name or _ROOT_PATH, module) for name, module in modules]
        # Alias paths of a shared instance are legitimate registered paths too.
        known = {
            name or _ROOT_PATH: module
            for name, module in self._model.named_modules(remove_duplicate=False)
        }
        unknown = [path for path in self._module_paths if path not in known]
        if unknown:
            hints = []
            for path in unknown:
                close = difflib.get_close_matches(path, list(known), n=3, cutoff=0.6)
                hint = (
                    f"did you mean {', '.join(repr(c) for c in close)}?"
                    if close
                    else "no similar path"
                )
                hints.append(f"{path!r} ({hint})")
            raise ValueError(
                f"unknown module path(s) for {_qualified_type_name(type(self._model))}: "
                f"{'; '.join(hints)}. Valid paths are the model's named_modules() names, "
                f"with {_ROOT_PATH!r} for the model itself."
            )
        targets: list[tuple[str, nn.Module]] = []
        owners: dict[int, str] = {}
        for path in self._module_paths:
            module = known[path]
            if id(module) in owners:
                raise ValueError(
                    f"module paths {owners[id(module)]!r} and {path!r} name the same module instance; "
                    "instance hooks cannot tell them apart, so pass only one"
                )
            owners[id(module)] = path
            targets.append((path, module))
        return targets

    def _make_pre_hook(
        self, label: str
    ) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._exhausted:
                return
            key = (threading.get_ident(), label)
            with self._lock:
                index = self._call_counts.get(label, 0)
                self._call_counts[label] = index + 1
                self._pending.setdefault(key, []).append((index, id(args)))
            roots: tuple[_WalkItem, ...] = (("args", args), ("kwargs", kwargs))
            self._walk(label, index, "input", roots)

        return pre_hook

    def _make_post_hook(self, label: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def post_hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if self._exhausted:
                return
            index = self._pop_pending((threading.get_ident(), label), id(args))
            if index is None:  # the call began before this capture was entered
                return
            self._walk(label, index, "output", (("output", output),))

        return post_hook

    def _pop_pending(self, key: tuple[int, str], args_id: int) -> int | None:
        """The call index of the invocation now finishing.

        Calls of one path on one thread finish in LIFO order, so the match is
        normally the top entry. A nested call that ended in a BaseException such
        as KeyboardInterrupt (which PyTorch's always-call hooks do not see) and
        was caught inside forward leaves a stale entry above ours: matching the
        args tuple identity finds the right entry and drops the stale ones.
        """
        with self._lock:
            stack = self._pending.get(key)
            if not stack:
                return None
            for position in range(len(stack) - 1, -1, -1):
                index, pending_args_id = stack[position]
                if pending_args_id == args_id:
                    del stack[position:]
                    return index
            # A pre-hook added after ours replaced args: fall back to LIFO order.
            return stack.pop()[0]

    # -- walking and recording -----------------------------------------------------------

    def _walk(
        self, label: str, index: int, direction: Direction, roots: tuple[_WalkItem, ...]
    ) -> None:
        """Depth-first walk of one input or output, with fresh node and depth quotas."""
        limits = self._limits
        nodes_left = limits.max_traversal_nodes
        max_depth = limits.max_container_depth
        # Each stack entry: lazy children and the depth those children sit at.
        stack: list[tuple[Iterator[_WalkItem], int]] = [(iter(roots), 0)]
        try:
            while stack:
                children, depth = stack[-1]
                item = next(children, None)
                if item is None:
                    stack.pop()
                    continue
                if nodes_left <= 0:
                    return
                nodes_left -= 1
                path, value = item
                if isinstance(value, torch.Tensor):
                    self._record(label, index, direction, path, value)
                    if self._exhausted:
                        return
                    continue
                if depth >= max_depth:
                    continue
                grandchildren = _children(value, path)
                if grandchildren is not None:
                    stack.append((grandchildren, depth + 1))
        except Exception as error:  # a user container misbehaving must not break forward
            warnings.warn(
                f"ModelCapture: stopped walking the {direction} of {label!r} (call {index}): "
                f"{type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )

    def _record(
        self, label: str, index: int, direction: Direction, path: str, tensor: torch.Tensor
    ) -> None:
        limits = self._limits
        reason = _omission_reason(tensor)
        numel = tensor.numel()
        element_size = tensor.element_size()
        with self._lock:
            if self._exhausted:
                return
            values: tuple[SampleScalar, ...] = ()
            if reason is None and numel > 0:
                budget = (limits.max_bytes - self._sampled_bytes) // element_size
                count = min(numel, limits.max_samples_per_tensor, budget)
                if count > 0:
                    try:
                        values = _row_major_prefix(tensor, count)
                    except Exception as error:  # exotic subclasses; keep the metadata at least
                        reason = f"sampling failed: {type(error).__name__}: {error}"
                        values = ()
            sampled = len(values) * element_size
            self._sampled_bytes += sampled
            self._snapshots.append(
                _new_snapshot(label, index, direction, path, tensor, numel, sampled, values, reason)
            )
            if (
                len(self._snapshots) >= limits.max_tensors
                or self._sampled_bytes >= limits.max_bytes
            ):
                self._exhausted = True


def _normalize_paths(module_paths: Sequence[str] | None) -> tuple[str, ...] | None:
    """Validate path types now (existence is checked on entry) and drop repeats."""
    if module_paths is None:
        return None
    if isinstance(module_paths, (str, bytes)) or not isinstance(module_paths, Sequence):
        raise TypeError(
            "module_paths must be a sequence of module path strings (e.g. ['encoder.layers.0']) "
            f"or None, got {type(module_paths).__name__} {module_paths!r}"
        )
    normalized: list[str] = []
    for path in module_paths:
        if not isinstance(path, str):
            raise TypeError(f"module_paths entries must be str, got {type(path).__name__} {path!r}")
        label = path or _ROOT_PATH
        if label not in normalized:
            normalized.append(label)
    return tuple(normalized)


def capture_model(
    model: nn.Module,
    *,
    module_paths: Sequence[str] | None = None,
    limits: CaptureLimits | None = None,
) -> ModelCapture:
    """Create an opt-in bounded capture context for one constructed model.

    Dense strided real, integer and boolean tensors supply bounded scalar
    samples. Complex, meta, non-strided and quantized tensors supply metadata
    only, with a reason in :class:`TensorSnapshot`; no conversion is attempted.
    All snapshots consume the shared record quota, including metadata-only and
    empty sources. Once byte or traversal quotas exhaust capture stops.

    Args:
        model: Constructed module whose registered instances may be observed.
        module_paths: Exact ``named_modules`` paths to hook. None selects every registered
            module, including ``"<root>"``. Unknown paths are rejected when the context is
            entered.
        limits: Positive traversal and sample quotas. Defaults to :class:`CaptureLimits`.

    Returns:
        Reusable context manager. Each entrance registers instance hooks; exit removes them
        even when the caller's forward raises. Snapshots, byte accounting, and per-module call
        indices remain cumulative if the same context object is entered again.
    """
    return ModelCapture(model, module_paths=module_paths, limits=limits)
