"""Hypothesis properties: quotas hold and samples are always the true row-major prefix."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from vinlens.model_inspection import CaptureLimits, TensorSnapshot, capture_model

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int64,
    torch.bool,
]


class Emit(nn.Module):
    """Returns whatever structure it was given at construction: the output walk under test."""

    def __init__(self, structure: Any) -> None:
        super().__init__()
        self.structure = structure

    def forward(self) -> Any:
        return self.structure


class PassThrough(nn.Module):
    def forward(self, *tensors: torch.Tensor) -> None:
        return None


@st.composite
def strided_tensors(draw: st.DrawFn) -> torch.Tensor:
    """Random views: permuted, sliced with steps, expanded, or transposed."""
    rank = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank))
    dtype = draw(st.sampled_from(DTYPES))
    base = torch.arange(max(1, torch.Size(shape).numel()) * 3, dtype=torch.float64)
    tensor = (base[: torch.Size(shape).numel()].reshape(shape) * 1.25 - 7).to(dtype)
    if rank:
        tensor = tensor.permute(draw(st.permutations(range(rank))))
        slices = []
        for size in tensor.shape:
            start = draw(st.integers(0, max(0, size - 1)))
            step = draw(st.integers(1, 3))
            slices.append(slice(start, None, step))
        tensor = tensor[tuple(slices)]
        if draw(st.booleans()):
            tensor = tensor.unsqueeze(0).expand(2, *tensor.shape)
    return tensor


@SETTINGS
@given(tensor=strided_tensors(), per_tensor=st.integers(1, 64))
def test_values_are_the_true_row_major_prefix(tensor: torch.Tensor, per_tensor: int) -> None:
    model = PassThrough()
    limits = CaptureLimits(max_samples_per_tensor=per_tensor, max_bytes=1 << 20)
    with capture_model(model, limits=limits) as capture:
        model(tensor)
    (snapshot,) = capture.snapshots
    flat = tensor.reshape(-1)
    expected = flat[: min(per_tensor, flat.numel())]
    if tensor.dtype in (torch.float16, torch.bfloat16):
        expected = expected.float()
    assert snapshot.values == tuple(expected.tolist())
    assert snapshot.shape == tuple(tensor.shape)
    assert snapshot.numel == tensor.numel()
    assert snapshot.sampled_bytes == len(snapshot.values) * tensor.element_size()
    assert snapshot.sample_omission_reason is None


@SETTINGS
@given(
    tensors=st.lists(strided_tensors(), min_size=1, max_size=12),
    calls=st.integers(1, 3),
    max_tensors=st.integers(1, 20),
    max_bytes=st.integers(1, 300),
    per_tensor=st.integers(1, 16),
)
def test_quotas_are_never_exceeded(
    tensors: list[torch.Tensor], calls: int, max_tensors: int, max_bytes: int, per_tensor: int
) -> None:
    model = PassThrough()
    limits = CaptureLimits(
        max_tensors=max_tensors, max_bytes=max_bytes, max_samples_per_tensor=per_tensor
    )
    capture = capture_model(model, limits=limits)
    for _ in range(calls):  # quotas are cumulative across entrances
        with capture:
            model(*tensors)
    snapshots = capture.snapshots
    assert len(snapshots) <= max_tensors
    assert capture.sampled_bytes == sum(s.sampled_bytes for s in snapshots) <= max_bytes
    # Replay the accounting: each sample is exactly what the remaining budget allowed.
    used = 0
    for snapshot in snapshots:
        source = tensors[int(snapshot.tensor_path[len("args[") : -1])]
        size = source.element_size()
        allowed = min(source.numel(), per_tensor, (max_bytes - used) // size)
        assert len(snapshot.values) == allowed
        used += allowed * size
    # Capture stops only when a quota is exhausted (or every call was recorded).
    if len(snapshots) < calls * len(tensors):
        assert len(snapshots) == max_tensors or used == max_bytes


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
            st.dictionaries(st.text("abc", min_size=1, max_size=2), children, max_size=3),
        ),
        max_leaves=30,
    )


def expected_paths(structure: Any, max_nodes: int, max_depth: int) -> list[str]:
    """Independent recursive oracle for the output walk (pre-order, shared node budget)."""
    found: list[str] = []
    budget = [max_nodes]

    def visit(value: Any, path: str, depth: int) -> bool:
        if budget[0] == 0:
            return False
        budget[0] -= 1
        if isinstance(value, torch.Tensor):
            found.append(path)
            return True
        if depth == max_depth:
            return True
        if isinstance(value, (list, tuple)):
            items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            items = [(f"{path}[{key!r}]", item) for key, item in value.items()]
        else:
            return True
        return all(visit(item, item_path, depth + 1) for item_path, item in items)

    visit(structure, "output", 0)
    return found


@SETTINGS
@given(
    structure=nested(st.one_of(st.just(None), st.integers(0, 9), st.just("tensor"))),
    max_nodes=st.integers(1, 40),
    max_depth=st.integers(1, 6),
)
def test_walk_honours_node_and_depth_quotas(structure: Any, max_nodes: int, max_depth: int) -> None:
    tensor = torch.ones(1)

    def materialize(value: Any) -> Any:
        if value == "tensor":
            return tensor
        if isinstance(value, list):
            return [materialize(v) for v in value]
        if isinstance(value, tuple):
            return tuple(materialize(v) for v in value)
        if isinstance(value, dict):
            return {k: materialize(v) for k, v in value.items()}
        return value

    structure = materialize(structure)
    model = Emit(structure)
    limits = CaptureLimits(
        max_traversal_nodes=max_nodes, max_container_depth=max_depth, max_tensors=10_000
    )
    with capture_model(model, limits=limits) as capture:
        model()
    outputs: list[TensorSnapshot] = [s for s in capture.snapshots if s.direction == "output"]
    paths = [s.tensor_path for s in outputs]
    assert paths == expected_paths(structure, max_nodes, max_depth)
    assert len(paths) <= max_nodes
    assert all(path.count("[") <= max_depth for path in paths)
