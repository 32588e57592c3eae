"""Capture records and sampling: quotas, tensor snapshots and their bounded value prefix.

A :class:`TensorSnapshot` holds a tensor's full metadata and at most
``max_samples_per_tensor`` of its values, read as a row-major prefix by narrowing
views down to the smallest leading block, so a 256 MiB non-contiguous CUDA activation
costs the same as a tiny one. :class:`CaptureLimits` are the quotas of one capture.
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import torch

from vinlens.model_inspection._naming import _qualified_type_name
from vinlens.model_inspection.summary import TensorSummary

__all__ = ["CaptureLimits", "Direction", "SampleScalar", "TensorSnapshot"]

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


# Dtypes whose leading bytes ``array.array`` reads as the same Python scalars as torch's
# ``tolist`` (only codes whose item size matches on this platform).
_ARRAY_CODES: dict[torch.dtype, str] = {
    dtype: code
    for dtype, code, size in (
        (torch.float32, "f", 4),
        (torch.float64, "d", 8),
        (torch.int8, "b", 1),
        (torch.uint8, "B", 1),
        (torch.int16, "h", 2),
        (torch.int32, "i", 4),
        (torch.int64, "q", 8),
    )
    if array.array(code).itemsize == size
}


def _row_major_prefix(tensor: torch.Tensor, count: int) -> tuple[SampleScalar, ...]:
    """The first ``count`` elements in row-major order as Python scalars.

    ``tolist`` copies only the small block (to CPU first when it lives on a
    device) and yields Python floats for float16/bfloat16/float8, so values can
    never alias the source storage or carry autograd state.
    """
    if type(tensor) is torch.Tensor and tensor.device.type == "cpu" and tensor.is_contiguous():
        code = _ARRAY_CODES.get(tensor.dtype)
        if code is not None and not tensor.is_neg():
            # The common activation: a copy of its leading ``count`` elements' bytes (a
            # contiguous tensor's data pointer is its first element), read as Python
            # scalars: a third of a NumPy view's cost inside a hook.
            size = count * tensor.element_size()
            return tuple(array.array(code, ctypes.string_at(tensor.data_ptr(), size)).tolist())
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
