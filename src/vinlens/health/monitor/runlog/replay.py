"""Replay bundles: one failing step, re-executable in any process on a fresh model.

A bundle is a ``torch.save`` file of plain containers and tensors (loaded back with
``torch.load(weights_only=True)``, which refuses any pickle that would build other objects
or run code): the model's parameters and buffers as the step started, the root module's
inputs, the gradient that arrived at the model's output (so the loss is not needed) and
the random-number states saved when the step started.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vinlens.health.gradient import GradientOrigin, find_nonfinite_gradient_origin
from vinlens.health.monitor.runlog.format import decode_json, encode_json
from vinlens.health.monitor.runlog.location import split_log_dir
from vinlens.hooks import HookSet

__all__ = [
    "DEFAULT_REPLAY_MAX_BYTES",
    "Replay",
    "ReplayCapture",
    "StartState",
    "bundle_name",
    "load_replay",
]

#: Default bound of one replay bundle; past it the bundle keeps the inputs and the output
#: gradient only, and the state must come from the user's checkpoint.
DEFAULT_REPLAY_MAX_BYTES = 256 << 20
_FORMAT = 1


def bundle_name(step: int) -> str:
    return f"replay-{step:012d}.pt"


def _plain(value: object, where: str) -> object:
    """A detached copy of ``value`` made of tensors and plain containers only."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise TypeError(f"{where} is a {type(value).__qualname__}")


def _output_tensors(value: object) -> list[torch.Tensor]:
    """Floating tensors that require grad in ``value`` (tensors, lists, tuples, dicts)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.requires_grad and value.is_floating_point() else []
    if isinstance(value, list | tuple):
        return [t for v in value for t in _output_tensors(v)]
    if isinstance(value, Mapping):
        return [t for k in sorted(value, key=str) for t in _output_tensors(value[k])]
    return []


def _rng_plain(rng: tuple[Any, ...]) -> dict[str, object]:
    cpu, cuda, python, legacy = rng
    version, state, gauss = python
    name, keys, pos, has_gauss, cached = legacy
    return {
        "torch": cpu.clone(),
        "cuda": None if cuda is None else [c.clone() for c in cuda],
        "python": [version, list(state), gauss],
        "numpy": [
            name,
            torch.from_numpy(np.asarray(keys).astype(np.int64)),
            pos,
            has_gauss,
            cached,
        ],
    }


def _rng_restore(plain: Mapping[str, Any]) -> None:
    torch.set_rng_state(plain["torch"])
    if plain["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(plain["cuda"])
    version, state, gauss = plain["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


class StartState:
    """The model's buffers as a step starts (BatchNorm running statistics and counters),
    copied every step into storage allocated once: one fused copy, no allocation.

    The buffers are the ones registered when the state was made (as the monitor's
    parameters are its model's at construction); a buffer replaced by another tensor
    since is found by identity and the storage is allocated again. A buffer registered
    later is not in the start state: a replay runs it from where the step left it.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._slots = [
            (module, name)
            for module in model.modules()
            for name, buffer in module._buffers.items()
            if buffer is not None
        ]
        self._sources: list[torch.Tensor] = []
        self._saved: list[torch.Tensor] = []

    def capture(self) -> StartState:
        """Copy the buffers' current values; returns ``self``."""
        current = [module._buffers.get(name) for module, name in self._slots]
        with torch.no_grad():
            if len(current) != len(self._sources) or any(
                a is not b for a, b in zip(current, self._sources, strict=True)
            ):
                self._sources = [b for b in current if b is not None]
                self._slots = [
                    slot for slot, b in zip(self._slots, current, strict=True) if b is not None
                ]
                self._saved = [b.detach().clone() for b in self._sources]
            elif self._saved:
                torch._foreach_copy_(self._saved, self._sources)
        return self

    def restore(self) -> None:
        """Put the captured values back into the buffers."""
        if self._saved:
            with torch.no_grad():
                torch._foreach_copy_(self._sources, self._saved)


class ReplayCapture:
    """Wraps a replayed ``step_fn``: restores the buffers of the step's start, records the
    root module's first call's inputs and the gradient at its outputs."""

    def __init__(self, model: nn.Module, start_buffers: StartState | None) -> None:
        self.model = model
        self.start_buffers = start_buffers
        self.inputs: object = None
        self.inputs_error: str | None = None
        self.output_grads: list[torch.Tensor | None] = []
        self._called = False
        self._hooks: HookSet | None = None
        self.state: dict[str, torch.Tensor] = {}
        self.rng: tuple[Any, ...] | None = None  # the states at the root's first forward

    def wrap(self, step_fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            if self.start_buffers is not None:
                self.start_buffers.restore()
            self.state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            with HookSet() as hooks:
                self._hooks = hooks
                hooks.forward_pre(self.model, self._pre, with_kwargs=True)
                hooks.forward(self.model, self._post)
                return step_fn()

        return run

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._called:
            return
        cuda = (
            torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
            else None
        )
        self.rng = (torch.get_rng_state(), cuda, random.getstate(), np.random.get_state())
        try:
            self.inputs = {"args": _plain(args, "args"), "kwargs": _plain(kwargs, "kwargs")}
        except TypeError as error:
            self.inputs_error = f"the model's inputs cannot be bundled: {error}"

    def _post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._called:
            return
        self._called = True
        tensors = _output_tensors(output)
        self.output_grads = [None] * len(tensors)
        for index, tensor in enumerate(tensors):

            def keep(grad: torch.Tensor, index: int = index) -> None:
                self.output_grads[index] = grad.detach().clone()

            if self._hooks is not None:
                self._hooks.tensor(tensor, keep)

    def bundle(
        self,
        step: int,
        rank: int,
        origin: GradientOrigin | None,
        rng: tuple[Any, ...],
        max_bytes: int,
    ) -> bytes | None:
        """The bundle's bytes, or None when the inputs cannot be bundled."""
        if self.inputs_error is not None or self.inputs is None:
            return None
        data: dict[str, object] = {
            "format": _FORMAT,
            "step": step,
            "rank": rank,
            "origin": encode_json({"origin": origin}).decode(),
            "inputs": self.inputs,
            "output_grads": self.output_grads,
            "rng": _rng_plain(self.rng if self.rng is not None else rng),
            "state": self.state,
            "state_note": None,
        }
        payload = _save(data)
        if len(payload) > max_bytes:
            data["state"] = None
            data["state_note"] = (
                f"the model's state ({len(payload)} bytes with it) is over replay_max_bytes"
                f" ({max_bytes}): load the weights of step {step} from your checkpoint"
            )
            payload = _save(data)
        return payload


def _save(data: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class Replay:
    """One recorded step, loaded into a model.

    Attributes:
        step: The step number.
        origin: The recorded :class:`GradientOrigin` (None when the monitor's replay stayed
            finite).
        forward: Zero arguments: the step's forward (random states restored, the root
            module called on the recorded inputs); usable as the ``run`` of
            ``find_nonfinite_origin``, ``precision_headroom``, ``capture_model``.
        step_fn: Zero arguments: zero_grad, forward, and backward of the recorded output
            gradient.
        state_restored: False when the bundle was over ``replay_max_bytes`` and the
            model's weights are the caller's (from their checkpoint).
        note: Why the state was not bundled, or None.
    """

    step: int
    origin: GradientOrigin | None
    forward: Callable[[], Any]
    step_fn: Callable[[], None]
    model: nn.Module
    state_restored: bool = True
    note: str | None = None

    def run(self) -> GradientOrigin | None:
        """``find_nonfinite_gradient_origin(model, self.step_fn)``: the recomputed origin."""
        return find_nonfinite_gradient_origin(self.model, self.step_fn)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _read(path_or_url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None) -> bytes:
    fs, path = split_log_dir(path_or_url, storage_options)
    try:
        if fs is None:
            with open(path, "rb") as f:
                return f.read()
        data: bytes = fs.cat_file(path)
        return data
    except FileNotFoundError as error:
        raise FileNotFoundError(f"no replay bundle at {os.fspath(path_or_url)!r}") from error


def load_replay(
    path_or_url: str | os.PathLike[str],
    model: nn.Module,
    *,
    storage_options: Mapping[str, Any] | None = None,
    sha256: str | None = None,
) -> Replay:
    """Load a replay bundle into ``model`` (constructed by the caller, same architecture).

    ``sha256``: the bundle's digest as its event recorded it
    (:meth:`TrainingRun.load_replay` passes it): a bundle whose bytes changed since it was
    written is refused rather than replayed.

    Raises:
        FileNotFoundError: no bundle there.
        ValueError: the file is empty, cut short or damaged (not a whole ``torch.save``
            file, or its digest is not ``sha256``), not a plain tensor file
            (``torch.load(weights_only=True)`` refused it: it would build other objects or
            run code), not a bundle, or its state does not fit ``model``.
    """
    where = os.fspath(path_or_url)
    raw = _read(path_or_url, storage_options)
    if not raw:
        raise ValueError(f"{where!r} is empty (0 bytes); expected a vinlens replay bundle")
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        raise ValueError(
            f"{where!r} fails its checksum: its {len(raw)} bytes are not the bundle that was"
            " written (the file was damaged or replaced); it is not replayed"
        )
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        data = torch.load(io.BytesIO(raw), weights_only=True, map_location=device)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"{where!r} is not a plain tensor file; torch.load(weights_only=True) refused it"
            f" (a bundle never needs code to load, and vinlens never runs code from a run"
            f" log): {_first_line(error)}"
        ) from error
    except (RuntimeError, EOFError, ValueError, IndexError, KeyError) as error:
        raise ValueError(
            f"{where!r} ({len(raw)} bytes) is not a whole torch.save file (cut short or"
            f" damaged); expected a vinlens replay bundle: {_first_line(error)}"
        ) from error
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"{where!r} is not a vinlens replay bundle (format {_FORMAT})")
    origin = decode_json(data["origin"].encode())["origin"]
    state = data["state"]
    if state is not None:
        try:
            model.load_state_dict(state)
        except RuntimeError as error:
            raise ValueError(
                f"{where!r}: the bundle's state does not fit the model given: {error}"
            ) from error
    buffers = [b.detach().clone() for b in model.buffers()]
    inputs, grads, rng = data["inputs"], data["output_grads"], data["rng"]

    def forward() -> Any:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
        _rng_restore(rng)
        return model(*inputs["args"], **inputs["kwargs"])

    def step_fn() -> None:
        model.zero_grad()
        tensors = _output_tensors(forward())
        pairs = [(t, g) for t, g in zip(tensors, grads, strict=False) if g is not None]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    return Replay(
        int(data["step"]),
        origin,
        forward,
        step_fn,
        model,
        state_restored=state is not None,
        note=data["state_note"],
    )
