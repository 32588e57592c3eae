"""Bounded walks of module inputs and outputs: (container path, tensor) pairs.

Paths read like the code that built the value (``args[0]``, ``kwargs['x']``,
``output['logits'][1]``, ``output.hidden``). Walks are lazy and stop at a node and
depth quota, so a hostile or cyclic structure costs a bounded amount of work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeAlias

import torch

__all__ = ["walk_tensors"]

_WalkItem: TypeAlias = tuple[str, object]
_ARG_PATHS = tuple(f"args[{position}]" for position in range(16))


def _arg_path(position: int) -> str:
    return _ARG_PATHS[position] if position < len(_ARG_PATHS) else f"args[{position}]"


def _key_repr(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def walk_tensors(
    roots: Iterable[tuple[str, object]],
    max_nodes: int,
    max_depth: int,
    *,
    on_limit: Callable[[], None] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for the tensors in a depth-first walk of ``roots``' containers.

    At most ``max_nodes`` nodes (tensors and containers) are visited and containers deeper
    than ``max_depth`` edges are not opened, so a hostile or cyclic structure costs a bounded
    amount of work. Each stack entry holds lazy children and the depth they sit at.
    ``on_limit()`` is called when a quota leaves part of the structure unvisited (nodes
    left when the node quota ran out, or a container at the depth limit), so that a
    caller can say its answer covers only part of the value.
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
            if on_limit is not None:
                on_limit()
            return
        nodes_left -= 1
        path, value = item
        if isinstance(value, torch.Tensor):
            yield path, value
            continue
        if depth >= max_depth:
            if on_limit is not None and _children(value, path) is not None:
                on_limit()
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
