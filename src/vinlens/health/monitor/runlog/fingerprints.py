"""Every-step fingerprints in a run log: their records on disk and their reading back.

A :data:`~vinlens.health.monitor.runlog.format.FINGERPRINTS` record holds the steps of one
flush. Payload, little-endian: uint32 ``n`` (steps), ``m`` (modules), ``s`` (bytes of the
signature list) and ``k`` (float64 input values); int64 steps (``n``); uint32 signature
index per step, padded to a multiple of 8 bytes; float64 weight norms ``(n, m)``; float64
gradient norms ``(n, m)``; float64 input values (``k``: per step, the sum and the sum of
squares of each tensor input, in order); then the signature list as JSON (one entry per
distinct list of ``[shape, dtype]`` of the root's tensor inputs). The header's CRC covers
all of it.

So a step costs ``16 * modules + 16 * inputs + 12`` bytes (plus the 16-byte record header
and the signature list once per flush). On sampled steps an
:data:`~vinlens.health.monitor.runlog.format.ORDER` record (JSON: ``step``, ``outputs``,
``grads``) gives the order in which the modules' outputs and their parameters' gradients
were produced; it is written only when the order changed.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "Fingerprints",
    "InputPrint",
    "decode_fingerprints",
    "encode_fingerprints",
    "fingerprint_payload",
]

_HEAD = struct.Struct("<IIII")

#: One tensor input of the root module: ``(shape, dtype, sum, sum of squares)`` (float64).
InputPrint = tuple[tuple[int, ...], str, float, float]
#: The shape and dtype of each tensor input of one step.
Signature = tuple[tuple[tuple[int, ...], str], ...]


@dataclass(frozen=True)
class Fingerprints:
    """What a rank logged of every step (see :meth:`TrainingRun.fingerprints`).

    Attributes:
        steps: int64 step numbers, ascending.
        module_paths: The columns (the run's watched module paths).
        weight_norm: float64 ``(steps, modules)``: the L2 norm of each module's own
            parameters (``parameters(recurse=False)``) as the step started; NaN for a
            module that owns none.
        grad_norm: float64 ``(steps, modules)``: the L2 norm of each module's own parameters'
            gradients after the backward (0 when none has a gradient; NaN when it owns none).
        inputs: Per step, one :data:`InputPrint` per tensor input of the root module's first
            call of the step (``()`` when the root was not called).
        output_order: The module paths in the order their outputs were produced on the
            latest sampled step logged (a container after its children); ``()`` if none.
        grad_order: The module paths in the order their parameters' gradients were produced
            on the latest sampled step logged; ``()`` if none.
    """

    steps: np.ndarray[Any, np.dtype[np.int64]]
    module_paths: tuple[str, ...]
    weight_norm: np.ndarray[Any, np.dtype[np.float64]]
    grad_norm: np.ndarray[Any, np.dtype[np.float64]]
    inputs: tuple[tuple[InputPrint, ...], ...]
    output_order: tuple[str, ...] = ()
    grad_order: tuple[str, ...] = ()

    @property
    def logged(self) -> bool:
        """Whether the run logged fingerprints (False for a log written without them)."""
        return len(self.steps) > 0


@dataclass(frozen=True)
class FingerprintBlock:
    """The steps of one record, decoded."""

    steps: np.ndarray[Any, np.dtype[np.int64]]
    weight_norm: np.ndarray[Any, np.dtype[np.float64]]
    grad_norm: np.ndarray[Any, np.dtype[np.float64]]
    inputs: tuple[tuple[InputPrint, ...], ...]


def encode_fingerprints(
    steps: Sequence[int],
    signatures: Sequence[Signature],
    values: np.ndarray[Any, np.dtype[np.float64]],
    modules: int,
) -> bytes:
    """One record's payload: ``values`` holds each step's ``2 * modules`` norms (weights,
    then gradients) followed by its ``2 * len(signature)`` input values, steps concatenated."""
    table: dict[Signature, int] = {}
    index = [table.setdefault(tuple(s), len(table)) for s in signatures]
    n = len(steps)
    widths = [2 * modules + 2 * len(s) for s in signatures]
    starts = np.cumsum([0, *widths[:-1]], dtype=np.int64)
    norms = np.empty((n, 2 * modules))
    inputs: list[np.ndarray[Any, Any]] = []
    for row, (start, width) in enumerate(zip(starts, widths, strict=True)):
        norms[row] = values[start : start + 2 * modules]
        inputs.append(values[start + 2 * modules : start + width])
    flat = np.concatenate(inputs) if inputs else np.empty(0)
    sig = json.dumps([[[list(shape), dtype] for shape, dtype in s] for s in table]).encode()
    pad = b"\0" * ((-4 * n) % 8)
    return b"".join(
        (
            _HEAD.pack(n, modules, len(sig), len(flat)),
            np.asarray(steps, "<i8").tobytes(),
            np.asarray(index, "<u4").tobytes() + pad,
            np.ascontiguousarray(norms[:, :modules], "<f8").tobytes(),
            np.ascontiguousarray(norms[:, modules:], "<f8").tobytes(),
            np.asarray(flat, "<f8").tobytes(),
            sig,
        )
    )


def fingerprint_payload(prints: Sequence[tuple[int, Any, torch.Tensor]], modules: int) -> bytes:
    """The payload of the steps a writer buffered: ``(step, signature, values)`` each, the
    values still on the device that computed them, copied to the host in one transfer per
    device (on the writer's flushing thread)."""
    parts: dict[torch.device, list[torch.Tensor]] = {}
    for _, _, values in prints:
        parts.setdefault(values.device, []).append(values)
    host = {
        device: torch.cat(tensors).cpu().numpy().astype(np.float64)
        for device, tensors in parts.items()
    }
    cursor = dict.fromkeys(host, 0)
    pieces = []
    for _, _, values in prints:
        n, at = int(values.numel()), cursor[values.device]
        pieces.append(host[values.device][at : at + n])
        cursor[values.device] = at + n
    flat = np.concatenate(pieces) if pieces else np.empty(0)
    return encode_fingerprints([p[0] for p in prints], [p[1] for p in prints], flat, modules)


def decode_fingerprints(data: Any, offset: int, end: int) -> FingerprintBlock:
    """The record whose payload spans ``data[offset:end]``.

    Raises:
        ValueError: the payload's lengths disagree with its size.
    """
    n, m, s, k = _HEAD.unpack_from(data, offset)
    at = offset + _HEAD.size
    steps = np.frombuffer(data, "<i8", n, at).astype(np.int64)
    at += 8 * n
    index = np.frombuffer(data, "<u4", n, at).tolist()
    at += 4 * n + (-4 * n) % 8
    weights = np.frombuffer(data, "<f8", n * m, at).reshape(n, m).astype(np.float64)
    at += 8 * n * m
    grads = np.frombuffer(data, "<f8", n * m, at).reshape(n, m).astype(np.float64)
    at += 8 * n * m
    flat = np.frombuffer(data, "<f8", k, at).tolist()
    at += 8 * k
    if at + s != end:
        raise ValueError(f"a fingerprint record at byte {offset} has inconsistent lengths")
    table = [
        tuple((tuple(int(d) for d in shape), str(dtype)) for shape, dtype in entry)
        for entry in json.loads(bytes(data[at:end]))
    ]
    inputs: list[tuple[InputPrint, ...]] = []
    cursor = 0
    for i in index:
        signature = table[i]
        prints = tuple(
            (shape, dtype, flat[cursor + 2 * j], flat[cursor + 2 * j + 1])
            for j, (shape, dtype) in enumerate(signature)
        )
        cursor += 2 * len(signature)
        inputs.append(prints)
    return FingerprintBlock(steps, weights, grads, tuple(inputs))


def join_fingerprints(
    module_paths: Sequence[str],
    blocks: Sequence[FingerprintBlock],
    orders: Sequence[dict[str, Any]],
) -> Fingerprints:
    """A rank's records as one :class:`Fingerprints` (blocks in the order they were read)."""
    m = len(module_paths)
    if blocks:
        steps = np.concatenate([b.steps for b in blocks])
        weights = np.concatenate([b.weight_norm for b in blocks])
        grads = np.concatenate([b.grad_norm for b in blocks])
    else:
        steps, weights, grads = np.empty(0, np.int64), np.empty((0, m)), np.empty((0, m))
    inputs = tuple(p for b in blocks for p in b.inputs)
    last = orders[-1] if orders else {}
    return Fingerprints(
        steps,
        tuple(module_paths),
        weights,
        grads,
        inputs,
        tuple(last.get("outputs", ())),
        tuple(last.get("grads", ())),
    )
