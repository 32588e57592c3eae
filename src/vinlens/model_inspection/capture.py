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

import difflib
import threading
import types
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vinlens.hooks import CallPairing, HookSet, module_walk
from vinlens.model_inspection._naming import ROOT_PATH, _qualified_type_name
from vinlens.model_inspection.snapshots import (
    CaptureLimits,
    Direction,
    SampleScalar,
    TensorSnapshot,
    _new_snapshot,
    _omission_reason,
    _row_major_prefix,
)
from vinlens.model_inspection.summary import SummaryCache, TensorSummary, stored_elements
from vinlens.model_inspection.walk import _arg_path, _WalkItem, walk_tensors
from vinlens.wrappers import (
    fold_module_walk,
    hold_eager,
    named_modules,
    unwrap_model,
)

__all__ = [
    "CaptureLimits",
    "Direction",
    "ModelCapture",
    "SampleScalar",
    "TensorSnapshot",
    "capture_model",
    "normalize_module_paths",
    "walk_tensors",
]


def _warn_stopped(label: str, index: int, direction: Direction, error: Exception) -> None:
    warnings.warn(
        f"ModelCapture: stopped walking the {direction} of {label!r} (call {index}): "
        f"{type(error).__name__}: {error}",
        RuntimeWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------- capture


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
        # Call indices per path (cumulative over entrances) and calls in flight per thread.
        self._calls: CallPairing[None] = CallPairing()
        self._hooks = HookSet()
        self._summaries = SummaryCache()
        self._summary_elements = 0
        self._active = False
        self._release_eager: Any = None  # while active: ends the eager stance (see __enter__)

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
            self._calls.clear()
            self._active = False
            release, self._release_eager = self._release_eager, None
            if release is not None:
                release()

    def _remove_hooks(self) -> None:
        """Remove every hook and restore every module's kwargs flags; safe mid-forward."""
        self._hooks.remove()

    def __enter__(self) -> ModelCapture:
        if self._active:
            raise RuntimeError(
                "this ModelCapture is already active; leave it (or call close()) before entering it again"
            )
        original = unwrap_model(self._model)
        # Paths of the original model: compile wrappers are folded away.
        modules = fold_module_walk(original, module_walk(original))
        # A whole-model capture needs no path checks; _register labels modules as it goes.
        targets = modules if self._module_paths is None else self._resolve_targets(modules)
        self._active = True
        if self._exhausted:  # quotas used up by an earlier entrance: nothing to observe
            return self
        try:
            # Compiled code runs eagerly until the capture closes, so that its hooks fire
            # and dynamo never traces them (see vinlens.wrappers).
            self._release_eager = hold_eager()
            self._register(targets)
        except BaseException:
            self.close()
            raise
        return self

    def _register(self, targets: Sequence[tuple[str, nn.Module]]) -> None:
        """Hook the targets: forward taps for a whole-model capture, else per module.

        Registering two instance hooks per module costs more than a light CNN's whole
        forward, and global hooks put every module call on PyTorch's slow hooked path,
        so a capture of every module uses :meth:`HookSet.hook_modules`' forward taps
        (modules with instance hooks of their own keep instance hooks, so ours still run
        after theirs and observe their changes). A capture of a few paths uses instance
        hooks only: a tap would put every other instance of a hooked class through it.
        """
        whole = self._module_paths is None
        if whole:
            # ``targets`` are named_modules() pairs here: the root is named "".
            targets = [(name or ROOT_PATH, module) for name, module in targets]
        self._hooks.hook_modules(
            targets,
            self._on_input,
            self._on_output,
            always_call=True,
            use_global=whole,
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
            for name, module in named_modules(self._model, remove_duplicate=False)
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
                f"unknown module path(s) for {_qualified_type_name(type(unwrap_model(self._model)))}: "
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

    def _on_input(self, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._exhausted:
            return
        index = self._calls.begin(label, args, None)
        # The common call, tensors passed positionally: the same records, in the same
        # order and under the same node quota, as the general walk below makes.
        if not kwargs and len(args) + 2 <= self._limits.max_traversal_nodes:
            for arg in args:  # a loop, not all(generator): this runs for every call
                if not isinstance(arg, torch.Tensor):
                    break
            else:
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
        call = self._calls.end(label, args)
        if call is None:  # the call began before this capture was entered
            return
        index = call[0]
        if isinstance(output, torch.Tensor):
            try:
                self._record(label, index, "output", "output", output)
            except Exception as error:  # an exotic tensor subclass must not break forward
                _warn_stopped(label, index, "output", error)
            return
        self._walk(label, index, "output", (("output", output),))

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
