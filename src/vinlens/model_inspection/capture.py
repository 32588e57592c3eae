"""Bounded tensor samples from hooks around the caller's own forward (:func:`capture_model`).

Three rules shape the implementation:

* Diagnostics must never change what they observe: hooks return ``None``, and
  every module's hook tables are left as they were found.
* Cost must follow the quotas, not the model: a capture copies at most
  ``max_samples_per_tensor`` elements of a tensor by narrowing views down to the
  row-major prefix, so a 256 MiB non-contiguous CUDA activation costs the same
  as a tiny one.
* Cleanup is unconditional: hooks are removed on every exit path, including
  ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import torch
from torch import nn
from torch.nn.modules import module as _torch_module
from torch.utils.hooks import RemovableHandle

from vinlens.model_inspection._naming import ROOT_PATH, _qualified_type_name
from vinlens.model_inspection.structure import _registered_modules
from vinlens.model_inspection.summary import TensorSummary, _SummaryCache, stored_elements

__all__ = [
    "CaptureLimits",
    "Direction",
    "ModelCapture",
    "SampleScalar",
    "TensorSnapshot",
    "capture_model",
]

#: Python scalars a tensor sample is converted to.
SampleScalar: TypeAlias = bool | int | float
Direction: TypeAlias = Literal["input", "output"]


@dataclass(frozen=True)
class CaptureLimits:
    """Positive quotas for one ModelCapture instance.

    Tensor-count, byte and summary quotas are cumulative across every call and context
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
        max_summary_elements: Maximum source elements read, across the instance, to
            compute :attr:`TensorSnapshot.summary` (whole-tensor reductions on the tensor's
            device); a tensor that no longer fits gets no summary. 0 turns summaries off.
            Each summary reads its tensor four to six times, so this bounds their cost.
    """

    max_tensors: int = 64
    max_samples_per_tensor: int = 32
    max_bytes: int = 16 * 1024
    max_traversal_nodes: int = 4096
    max_container_depth: int = 32
    max_summary_elements: int = 1 << 18

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            # Summaries are an extra that may be switched off; every other quota must allow
            # some progress.
            expected = "non-negative" if field.name == "max_summary_elements" else "positive"
            # bool is an int subclass, but ``max_tensors=True`` is always a mistake.
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"CaptureLimits.{field.name} must be a {expected} int, "
                    f"got {type(value).__name__} {value!r}"
                )
            if value < 0 or (value == 0 and expected == "positive"):
                raise ValueError(
                    f"CaptureLimits.{field.name} must be a {expected} int, got {value!r}"
                )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> CaptureLimits:
        """Limits from a mapping of field names, such as the JSON object a browser sends.

        Missing fields keep their defaults. Unknown keys, and values that are not
        positive ints (``True``, ``1.5``, ``None``, ``"8"``), raise an error naming
        the field and what it expects; nothing is coerced, so a typo in the
        browser never turns into a silently different quota.

        Raises:
            TypeError: ``mapping`` is not a mapping, or a value is not an int.
            ValueError: an unknown key, or a value that is not positive.
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(
                "capture limits must be a mapping of CaptureLimits fields (e.g. "
                f'{{"max_tensors": 64}}), got {_qualified_type_name(type(mapping))}'
            )
        names = _LIMIT_FIELDS
        unknown = [key for key in mapping if key not in names]
        if unknown:
            raise ValueError(
                f"unknown capture limit(s) {', '.join(repr(key) for key in unknown)}; "
                f"expected some of {', '.join(names)}"
            )
        return cls(**{str(key): value for key, value in mapping.items()})  # type: ignore[arg-type]


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
        summary: Whole-tensor statistics of a real floating source, computed on its device
            (see :class:`~vinlens.model_inspection.TensorSummary`); None for other dtypes,
            metadata-only sources, or a tensor the reductions failed on.
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
    summary: TensorSummary | None = None


_LIMIT_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(CaptureLimits))


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


# Dtypes whose NumPy tolist() gives the same Python scalars as torch's (bfloat16 and
# the float8 types have no NumPy dtype).
_NUMPY_DTYPES = frozenset(
    {torch.float16, torch.float32, torch.float64, torch.bool}
    | {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
)


def _row_major_prefix(tensor: torch.Tensor, count: int) -> tuple[SampleScalar, ...]:
    """The first ``count`` elements in row-major order as Python scalars.

    ``tolist`` copies only the small block (to CPU first when it lives on a
    device) and yields Python floats for float16/bfloat16/float8, so values can
    never alias the source storage or carry autograd state.
    """
    if (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.dtype in _NUMPY_DTYPES
        and tensor.is_contiguous()
        and not tensor.is_neg()
    ):
        # The common activation: a NumPy view of the leading run of memory is the cheapest
        # way to read a few values (about half the cost of a torch view and tolist()).
        flat: Any = tensor.detach().numpy().reshape(-1)
        return tuple(flat[:count].tolist())
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
    summary: TensorSummary | None = None,
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
        # Only nested tensors (which always carry a reason) lack a plain shape.
        shape=tuple(tensor.shape) if reason is None else _tensor_shape(tensor),
        dtype=_dtype_name(tensor.dtype),
        device=_device_name(tensor.device),
        numel=numel,
        sampled_bytes=sampled_bytes,
        values=values,
        sample_omission_reason=reason,
        summary=summary,
    )
    return record


# --------------------------------------------------------------------------- traversal

_WalkItem: TypeAlias = tuple[str, object]
_ARG_PATHS = tuple(f"args[{position}]" for position in range(16))


def _warn_stopped(label: str, index: int, direction: Direction, error: Exception) -> None:
    warnings.warn(
        f"ModelCapture: stopped walking the {direction} of {label!r} (call {index}): "
        f"{type(error).__name__}: {error}",
        RuntimeWarning,
        stacklevel=3,
    )


def _arg_path(position: int) -> str:
    return _ARG_PATHS[position] if position < len(_ARG_PATHS) else f"args[{position}]"


def _key_repr(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def walk_tensors(
    roots: Iterable[tuple[str, object]], max_nodes: int, max_depth: int
) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for the tensors in a depth-first walk of ``roots``' containers.

    At most ``max_nodes`` nodes (tensors and containers) are visited and containers deeper
    than ``max_depth`` edges are not opened, so a hostile or cyclic structure costs a bounded
    amount of work. Each stack entry holds lazy children and the depth they sit at.
    """
    nodes_left = max_nodes
    stack: list[tuple[Iterator[tuple[str, object]], int]] = [(iter(roots), 0)]
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
            yield path, value
            continue
        if depth >= max_depth:
            continue
        grandchildren = _children(value, path)
        if grandchildren is not None:
            stack.append((grandchildren, depth + 1))


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
            found.append(name or ROOT_PATH)
    return found


_Node: TypeAlias = tuple[str, "weakref.ref[nn.Module]", int, tuple[str, ...], tuple[int, ...]]


class _Walk:
    """One model's ``named_modules()`` pairs and what proves them current.

    The walk is determined by each module's ``_modules`` table (same table object,
    same names, same children in the same order), so comparing those tables with
    the ones seen when the walk was made is enough to reuse it: it costs a third
    of walking again on light CNNs. Only weak references and ids are kept, so a
    cached walk never keeps a model or any of its modules alive; a child replaced
    by a new object at a freed one's address is caught because the freed one's
    weak reference is dead.
    """

    __slots__ = ("__weakref__", "model", "nodes")

    def __init__(self, model: nn.Module, modules: list[tuple[str, nn.Module]]) -> None:
        key = id(model)
        this = weakref.ref(self)

        def forget(_: object) -> None:
            # Runs when the model is freed (possibly inside any other code): no lock.
            if _WALKS.get(key) is this():
                _WALKS.pop(key, None)

        self.model = weakref.ref(model, forget)
        self.nodes: list[_Node] = []
        for name, module in modules:
            table = module.__dict__["_modules"]
            self.nodes.append(
                (name, weakref.ref(module), id(table), tuple(table), tuple(map(id, table.values())))
            )

    def modules(self, model: nn.Module) -> list[tuple[str, nn.Module]] | None:
        """The walk if ``model``'s module tree is unchanged since it was made, else None."""
        if self.model() is not model:
            return None
        found: list[tuple[str, nn.Module]] = []
        for name, ref, table_id, keys, child_ids in self.nodes:
            module = ref()
            if module is None:
                return None
            table = module.__dict__["_modules"]
            if id(table) != table_id:
                return None
            if keys:
                if tuple(table) != keys or tuple(map(id, table.values())) != child_ids:
                    return None
            elif table:
                return None
            found.append((name, module))
        return found


# Walks by model identity; an entry leaves when its model is freed.
_WALKS: dict[int, _Walk] = {}


def _module_walk(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())``, reused while the model's module tree is unchanged."""
    cached = _WALKS.get(id(model))
    if cached is not None:
        modules = cached.modules(model)
        if modules is not None:
            return modules
    modules = _registered_modules(model)
    default_walk = nn.Module.named_modules
    # A class with its own named_modules may answer differently without any table
    # changing: its models are walked every time.
    if all(type(module).named_modules is default_walk for _, module in modules):
        # Modules that refuse weak references are simply walked every time.
        with contextlib.suppress(TypeError):
            _WALKS[id(model)] = _Walk(model, modules)
    return modules


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
        self._module_paths = normalize_module_paths(module_paths)
        self._lock = threading.Lock()
        self._snapshots: list[TensorSnapshot] = []
        self._sampled_bytes = 0
        # Set once max_tensors or max_bytes is used up; hooks then return at once.
        self._exhausted = False
        self._call_counts: dict[str, int] = {}
        # Per (thread, path): stack of (call index, id of the args tuple) for calls in flight.
        self._pending: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self._handles: list[RemovableHandle] = []
        # Modules given a with-kwargs flag for the global pre-hook, and that hook's id.
        self._flagged: list[nn.Module] = []
        self._global_pre_id: int | None = None
        self._summaries = _SummaryCache()
        self._summary_elements = 0
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
        """Report whether instance hooks are currently registered.

        True from entry to exit. Once ``max_tensors`` or ``max_bytes`` is used up
        the hooks themselves are released early (nothing more can be recorded),
        but the capture stays active until it is left or closed.
        """
        return self._active

    @property
    def limits(self) -> CaptureLimits:
        """The quotas this capture enforces."""
        return self._limits

    def close(self) -> None:
        """Remove this capture's hooks and pending calls; repeated calls are safe."""
        try:
            self._remove_hooks()
        finally:
            with self._lock:
                self._pending.clear()
            self._active = False

    def _remove_hooks(self) -> None:
        """Remove every hook and restore every module's kwargs flags; safe mid-forward."""
        handles, self._handles = self._handles, []
        flagged, self._flagged = self._flagged, []
        hook_id, self._global_pre_id = self._global_pre_id, None
        try:
            for handle in handles:
                handle.remove()
        finally:
            if hook_id is not None:
                for module in flagged:
                    module._forward_pre_hooks_with_kwargs.pop(hook_id, None)

    def __enter__(self) -> ModelCapture:
        if self._active:
            raise RuntimeError(
                "this ModelCapture is already active; leave it (or call close()) before entering it again"
            )
        modules = _module_walk(self._model)
        # A whole-model capture needs no path checks; _register labels modules as it goes.
        targets = modules if self._module_paths is None else self._resolve_targets(modules)
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
        if self._exhausted:  # quotas used up by an earlier entrance: nothing to observe
            return self
        try:
            self._register(targets)
        except BaseException:
            self.close()
            raise
        return self

    def _register(self, targets: Sequence[tuple[str, nn.Module]]) -> None:
        """Hook the targets: one global hook pair for a whole-model capture, else per module.

        Registering two instance hooks per module costs more than a light CNN's whole
        forward, so a capture of every module registers one global pre-hook and one
        global forward hook, filtered by module identity, plus a with-kwargs flag per
        module (restored on close). Modules that already carry instance forward hooks
        keep instance hooks, so ours still run after theirs and observe their changes.
        A capture of a few paths uses instance hooks only: global hooks would put
        every other module's call on PyTorch's slower hooked path.
        """
        instance: list[tuple[str, nn.Module]] = []
        global_targets: dict[int, str] = {}
        if self._module_paths is None:
            # ``targets`` are named_modules() pairs here: the root is named "".
            for name, module in targets:
                if module._forward_pre_hooks or module._forward_hooks:
                    instance.append((name or ROOT_PATH, module))
                else:
                    global_targets[id(module)] = name or ROOT_PATH
        else:
            instance = list(targets)
        if global_targets:
            self._register_global(targets, global_targets)
        for label, module in instance:
            self._handles.append(
                module.register_forward_pre_hook(self._make_pre_hook(label), with_kwargs=True)
            )
            self._handles.append(
                module.register_forward_hook(self._make_post_hook(label), always_call=True)
            )

    def _register_global(
        self, targets: Sequence[tuple[str, nn.Module]], labels: dict[int, str]
    ) -> None:
        on_input, on_output = self._on_input, self._on_output
        find = labels.get

        def pre_hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
        ) -> None:
            label = find(id(module))
            if label is not None:
                on_input(label, args, kwargs if kwargs is not None else {})

        def post_hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            label = find(id(module))
            if label is not None:
                on_output(label, args, output)

        handle = _torch_module.register_module_forward_pre_hook(pre_hook)
        self._handles.append(handle)
        self._global_pre_id = handle.id
        for _, module in targets:
            if id(module) in labels:
                # PyTorch passes kwargs to any pre-hook whose id a module flags, global or not.
                module._forward_pre_hooks_with_kwargs[handle.id] = True
                self._flagged.append(module)
        self._handles.append(
            _torch_module.register_module_forward_hook(post_hook, always_call=True)
        )

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
            return [(name or ROOT_PATH, module) for name, module in modules]
        # Alias paths of a shared instance are legitimate registered paths too.
        known = {
            name or ROOT_PATH: module
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
                f"with {ROOT_PATH!r} for the model itself."
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
        on_input = self._on_input

        def pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            on_input(label, args, kwargs)

        return pre_hook

    def _make_post_hook(self, label: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        on_output = self._on_output

        def post_hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            on_output(label, args, output)

        return post_hook

    def _on_input(self, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._exhausted:
            return
        key = (threading.get_ident(), label)
        with self._lock:
            index = self._call_counts.get(label, 0)
            self._call_counts[label] = index + 1
            self._pending.setdefault(key, []).append((index, id(args)))
        # The common call, tensors passed positionally: the same records, in the same
        # order and under the same node quota, as the general walk below makes.
        if (
            not kwargs
            and len(args) + 2 <= self._limits.max_traversal_nodes
            and all(isinstance(arg, torch.Tensor) for arg in args)
        ):
            try:
                for position, arg in enumerate(args):
                    self._record(label, index, "input", _arg_path(position), arg)
                    if self._exhausted:
                        return
            except Exception as error:  # an exotic tensor subclass must not break forward
                _warn_stopped(label, index, "input", error)
            return
        roots: tuple[_WalkItem, ...] = (("args", args), ("kwargs", kwargs))
        self._walk(label, index, "input", roots)

    def _on_output(self, label: str, args: tuple[Any, ...], output: Any) -> None:
        if self._exhausted:
            return
        index = self._pop_pending((threading.get_ident(), label), id(args))
        if index is None:  # the call began before this capture was entered
            return
        if isinstance(output, torch.Tensor):
            try:
                self._record(label, index, "output", "output", output)
            except Exception as error:  # an exotic tensor subclass must not break forward
                _warn_stopped(label, index, "output", error)
            return
        self._walk(label, index, "output", (("output", output),))

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
        try:
            for path, value in walk_tensors(
                roots, limits.max_traversal_nodes, limits.max_container_depth
            ):
                self._record(label, index, direction, path, value)
                if self._exhausted:
                    return
        except Exception as error:  # a user container misbehaving must not break forward
            _warn_stopped(label, index, direction, error)

    def _record(
        self, label: str, index: int, direction: Direction, path: str, tensor: torch.Tensor
    ) -> None:
        limits = self._limits
        reason = _omission_reason(tensor)
        numel = tensor.numel()
        element_size = tensor.element_size()
        if self._exhausted:
            return
        # Reduced before taking the lock: it reads the whole tensor, sampling does not.
        summary = None
        if reason is None and self._limits.max_summary_elements:
            summary = self._summary(tensor)
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
                _new_snapshot(
                    label, index, direction, path, tensor, numel, sampled, values, reason, summary
                )
            )
            if (
                len(self._snapshots) >= limits.max_tensors
                or self._sampled_bytes >= limits.max_bytes
            ):
                self._exhausted = True
        if self._exhausted:
            # Nothing more can be recorded: the rest of the forward runs unhooked. Hook
            # tables are copied before PyTorch iterates them, so removal here is safe.
            self._remove_hooks()

    def _summary(self, tensor: torch.Tensor) -> TensorSummary | None:
        """The tensor's summary while ``max_summary_elements`` allows, else None."""
        if not tensor.is_floating_point():
            return None
        cached = self._summaries.get(tensor)
        if cached is not None:
            return cached.finish()
        elements = stored_elements(tensor)
        with self._lock:
            if self._summary_elements + elements > self._limits.max_summary_elements:
                return None
            self._summary_elements += elements
        try:
            return self._summaries.summary(tensor)
        except Exception:  # exotic subclasses: the snapshot keeps its sample and metadata
            return None


def normalize_module_paths(module_paths: Sequence[str] | None) -> tuple[str, ...] | None:
    """``module_paths`` as a tuple of labels (``""`` read as ``"<root>"``), repeats dropped.

    Only types are checked here (existence needs the model); None stays None.

    Raises:
        TypeError: not a sequence of strings (a bare string is refused).
    """
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
        label = path or ROOT_PATH
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
