"""Model health: where the first NaN appeared, what differs between two models, and
activation statistics over many batches.

Everything here observes the caller's own forward through module hooks that return
``None`` (outputs are never changed) and that are removed on every exit path,
including exceptions raised by the forward. Tensor statistics are
:class:`~vinlens.model_inspection.TensorSummary` records computed on the tensors'
own device (see :mod:`vinlens.model_inspection.summary` for their cost); no
activation is copied to the host.

* :func:`find_nonfinite_origin`: the first module call whose inputs were finite
  and whose output is not.
* :func:`compare_models`: per-module drift between two models run on the same
  input, in lockstep, so that no activation is retained.
* :func:`collect_activation_stats`: per-module summaries streamed over batches
  in mergeable accumulators.
"""

from __future__ import annotations

import contextlib
import math
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from vinlens.model_inspection import ROOT_PATH, SummaryAccumulator, TensorSummary
from vinlens.model_inspection.capture import _normalize_paths, walk_tensors
from vinlens.model_inspection.summary import (
    BLOCK_ELEMENTS,
    _blocks,
    _FiniteCache,
    _SummaryCache,
)

__all__ = [
    "ActivationAccumulator",
    "ActivationStats",
    "ModelDiff",
    "ModuleDiff",
    "NonFiniteOrigin",
    "TensorSummary",
    "TensorTrace",
    "collect_activation_stats",
    "compare_models",
    "find_nonfinite_origin",
]

#: Containers and tensors visited in one module input or output (like CaptureLimits').
MAX_WALK_NODES = 4096
#: Container edges followed from an input or output root.
MAX_WALK_DEPTH = 32

_Batch = TypeVar("_Batch")
_Call = tuple[str, int, tuple["TensorTrace", ...], tuple["TensorTrace", ...], bool | None]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class TensorTrace:
    """One floating tensor of a module call's inputs or output, with its summary.

    Attributes:
        tensor_path: Container path, as in snapshots: ``args[0]``, ``kwargs['x']``, ``output[1]``.
        shape: Shape of the tensor.
        dtype: String form of its dtype.
        summary: Whole-tensor statistics.
    """

    tensor_path: str
    shape: tuple[int, ...]
    dtype: str
    summary: TensorSummary


@dataclass(frozen=True)
class NonFiniteOrigin:
    """Where NaN or Inf values first appeared in one forward.

    Attributes:
        module_path: Registered path of the module call that produced them (``"<root>"``
            for the model itself).
        call_index: Zero-based invocation index of that path within the forward.
        inputs: The call's floating inputs, summarized before the call ran.
        outputs: The call's floating outputs, summarized when it returned.
        propagated_to: Paths of the other module calls that returned NaN or Inf, in
            execution order, each path once: the modules it spread to (including calls
            nested inside the origin that its own code fed, and the modules enclosing it).
        input_nonfinite: True when no module produced the values: the origin's inputs
            already held NaN or Inf (the model's own input, or code between modules),
            and the origin is the first module call that received them.
        inputs_modified_in_place: The origin's inputs are summarized when it returns
            (summarizing every call's inputs in advance would cost a full summary per
            tensor); True when the call changed one of them in place, so ``inputs``
            describe the changed values (they were finite before the call unless
            ``input_nonfinite``), None when that cannot be told (inference-mode tensors
            carry no version counter). False for ``input_nonfinite`` origins, whose
            inputs are summarized before the call.
    """

    module_path: str
    call_index: int
    inputs: tuple[TensorTrace, ...]
    outputs: tuple[TensorTrace, ...]
    propagated_to: tuple[str, ...]
    input_nonfinite: bool
    inputs_modified_in_place: bool | None = False


@dataclass(frozen=True)
class ModuleDiff:
    """Difference between the outputs of one paired module call in two models.

    Metrics treat the call's floating output tensors as one vector. Positions where
    both outputs hold the same value (NaN included) differ by zero.

    Attributes:
        module_path: Registered path, the same in both models.
        call_index: Zero-based invocation index of the path within the forward.
        max_abs_diff: Largest ``|a - b|``; NaN when one side is NaN where the other is not.
        relative_l2: ``||a - b|| / ||a||`` (0 when both are zero, inf when only ``a`` is).
        cosine: Cosine similarity of ``a`` and ``b`` (1 when both are zero).
        summary_a: Statistics of model A's output.
        summary_b: Statistics of model B's output.
    """

    module_path: str
    call_index: int
    max_abs_diff: float
    relative_l2: float
    cosine: float
    summary_a: TensorSummary
    summary_b: TensorSummary


@dataclass(frozen=True)
class ModelDiff:
    """Per-module drift between two models driven on the same input.

    Attributes:
        modules: Paired module calls in execution order (order of their return).
        unpaired_paths: Paths registered in only one of the two models (never compared).
    """

    modules: tuple[ModuleDiff, ...]
    unpaired_paths: tuple[str, ...] = ()

    def first_divergent_path(self, rtol: float = 1e-5) -> str | None:
        """The first module (execution order) whose output differs beyond ``rtol``.

        A call diverges when ``relative_l2 > rtol`` or when its relative error is not a
        number (NaN on one side only). None when every paired output agrees.
        """
        if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not rtol >= 0:
            raise ValueError(f"rtol must be a non-negative number, got {rtol!r}")
        for module in self.modules:
            if not module.relative_l2 <= rtol:
                return module.module_path
        return None


@dataclass(frozen=True)
class ActivationStats:
    """Per-module output statistics over every batch of a stream.

    Attributes:
        modules: Module path to the summary of all its outputs over every call and batch,
            in order of each path's first return.
        batches: Number of batches that ran.
    """

    modules: Mapping[str, TensorSummary]
    batches: int


class ActivationAccumulator:
    """Mergeable per-module accumulators behind :class:`ActivationStats`.

    ``update(path, value)`` adds every floating tensor in a module output,
    ``merge`` folds another accumulator (for example one per worker or shard) in,
    ``finish`` returns the record. Memory is a few numbers per module path,
    independent of the number of batches.
    """

    def __init__(self) -> None:
        self._modules: dict[str, SummaryAccumulator] = {}
        self.batches = 0
        # A container's output is usually its last child's tensor: reduced once.
        self._cache = _SummaryCache()

    def __getstate__(self) -> dict[str, object]:
        # The per-forward cache holds weak references; accumulators travel without it.
        return {"_modules": self._modules, "batches": self.batches}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._modules = state["_modules"]
        self.batches = state["batches"]
        self._cache = _SummaryCache()

    def update(self, module_path: str, value: object) -> ActivationAccumulator:
        """Add the floating tensors found in ``value`` (a module output) to ``module_path``."""
        accumulator = self._modules.get(module_path)
        if accumulator is None:
            accumulator = self._modules[module_path] = SummaryAccumulator()
        for _, tensor in _floating_tensors(value, "output"):
            accumulator.merge(self._cache.moments(tensor))
        return self

    def merge(self, other: ActivationAccumulator) -> ActivationAccumulator:
        """Fold ``other`` into this accumulator; paths new to this one keep their order."""
        if not isinstance(other, ActivationAccumulator):
            raise TypeError(
                f"can only merge an ActivationAccumulator, got {type(other).__module__}."
                f"{type(other).__qualname__}"
            )
        for path, accumulator in other._modules.items():
            mine = self._modules.get(path)
            if mine is None:
                mine = self._modules[path] = SummaryAccumulator()
            mine.merge(accumulator)
        self.batches += other.batches
        return self

    def finish(self) -> ActivationStats:
        """The statistics of everything added so far."""
        modules = {path: acc.finish() for path, acc in self._modules.items()}
        return ActivationStats(modules=types.MappingProxyType(modules), batches=self.batches)


# --------------------------------------------------------------------------- shared helpers


def _floating_tensors(value: object, root: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for the real floating dense tensors in a bounded walk of ``value``."""
    if isinstance(value, torch.Tensor):  # the common module output: no walk
        if _summarizable(value):
            yield root, value
        return
    for path, tensor in walk_tensors(((root, value),), MAX_WALK_NODES, MAX_WALK_DEPTH):
        if _summarizable(tensor):
            yield path, tensor


def _summarizable(tensor: torch.Tensor) -> bool:
    return (
        tensor.is_floating_point()
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and not tensor.is_nested
    )


def _check_model(model: object, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{name} must be a torch.nn.Module, got {type(model).__module__}."
            f"{type(model).__qualname__}"
        )
    return model


def _check_callable(run: object, what: str) -> None:
    if not callable(run):
        raise TypeError(f"run must be a callable that {what}, got {type(run).__qualname__}")


def _labelled_modules(
    model: nn.Module, module_paths: Sequence[str] | None
) -> list[tuple[str, nn.Module]]:
    """(path, module) for every module, or for the named paths (unknown ones refused)."""
    modules = [(name or ROOT_PATH, module) for name, module in model.named_modules()]
    wanted = _normalize_paths(module_paths)
    if wanted is None:
        return modules
    known = dict(modules)
    unknown = [path for path in wanted if path not in known]
    if unknown:
        raise ValueError(
            f"unknown module path(s) {', '.join(repr(p) for p in unknown)}: expected "
            f"named_modules() paths of {type(model).__qualname__}, with {ROOT_PATH!r} "
            "for the model itself"
        )
    return [(path, known[path]) for path in wanted]


@contextlib.contextmanager
def _instance_hooks(
    targets: Sequence[tuple[str, nn.Module]],
    pre: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None,
    post: Callable[[str, tuple[Any, ...], Any], None],
) -> Iterator[None]:
    """Register a pre- and post-hook per target; every handle is removed on every exit."""
    with contextlib.ExitStack() as handles:
        for label, module in targets:
            if pre is not None:

                def pre_hook(
                    _module: nn.Module,
                    args: tuple[Any, ...],
                    kwargs: dict[str, Any],
                    _label: str = label,
                ) -> None:
                    pre(_label, args, kwargs)

                handles.callback(
                    module.register_forward_pre_hook(pre_hook, with_kwargs=True).remove
                )

            def post_hook(
                _module: nn.Module, args: tuple[Any, ...], output: Any, _label: str = label
            ) -> None:
                post(_label, args, output)

            handles.callback(module.register_forward_hook(post_hook).remove)
        yield


@contextlib.contextmanager
def _module_hooks(
    targets: Sequence[tuple[str, nn.Module]],
    pre: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None,
    post: Callable[[str, tuple[Any, ...], Any], None],
) -> Iterator[None]:
    """Hooks on every target, removed on every exit: global hooks where they can serve.

    Registering two instance hooks per module costs more than a light CNN's whole
    forward, so modules without hooks of their own are served by one global pre-hook
    and one global forward hook filtered by module identity (plus a with-kwargs flag
    per module for the pre-hook, removed on exit). Modules that already carry
    instance hooks get instance hooks appended after theirs, so these still see
    what those hooks change.
    """
    instance: list[tuple[str, nn.Module]] = []
    labels: dict[int, str] = {}
    for label, module in targets:
        if module._forward_pre_hooks or module._forward_hooks:
            instance.append((label, module))
        else:
            labels[id(module)] = label
    find = labels.get
    flagged: list[nn.Module] = []
    with contextlib.ExitStack() as handles:
        if labels:
            if pre is not None:
                call_pre = pre

                def global_pre(
                    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
                ) -> None:
                    label = find(id(module))
                    if label is not None:
                        call_pre(label, args, kwargs if kwargs is not None else {})

                handle = _torch_module.register_module_forward_pre_hook(global_pre)
                handles.callback(handle.remove)

                def unflag(hook_id: int = handle.id) -> None:
                    for module in flagged:
                        module._forward_pre_hooks_with_kwargs.pop(hook_id, None)

                handles.callback(unflag)
                for _, module in targets:
                    if id(module) in labels:
                        # PyTorch passes kwargs to any pre-hook whose id a module flags.
                        module._forward_pre_hooks_with_kwargs[handle.id] = True
                        flagged.append(module)

            def global_post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
                label = find(id(module))
                if label is not None:
                    post(label, args, output)

            handles.callback(_torch_module.register_module_forward_hook(global_post).remove)
        handles.enter_context(_instance_hooks(instance, pre, post))
        yield


_Found = list[tuple[str, torch.Tensor]]


def _traces(cache: _SummaryCache, tensors: _Found) -> tuple[TensorTrace, ...]:
    return tuple(
        TensorTrace(path, tuple(tensor.shape), str(tensor.dtype), cache.summary(tensor))
        for path, tensor in tensors
    )


def _input_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Found:
    found = list(_floating_tensors(args, "args"))
    if kwargs:
        found.extend(_floating_tensors(kwargs, "kwargs"))
    return found


def _versions(tensors: _Found) -> tuple[int, ...] | None:
    """Version counters of ``tensors``; None when one has none (an inference tensor)."""
    if any(tensor.is_inference() for _, tensor in tensors):
        return None
    return tuple(tensor._version for _, tensor in tensors)


# --------------------------------------------------------------------------- NaN origin


def find_nonfinite_origin(model: nn.Module, run: Callable[[], object]) -> NonFiniteOrigin | None:
    """Run the forward once and report the module call where NaN or Inf first appeared.

    Every registered module is hooked. Before each module call its floating inputs
    are checked for NaN and Inf, and when it returns its floating outputs, on the
    tensors' device (one reduction per tensor; a tensor shared as one module's
    output and the next one's input is checked once). The origin is the first
    call, in order of return, whose inputs were all finite and whose output is
    not: a ``log`` of a negative value in module ``k`` is reported as ``k``, not
    as the modules that merely passed the NaN on. When no such call exists but a
    call received non-finite inputs, the first such call is reported with
    ``input_nonfinite=True``.

    Only the reported call is summarized, so a finite forward costs one check per
    tensor. The origin's inputs are summarized when it returns: a module that
    modified them in place (``x.log_()``) leaves its changed values there, which
    ``inputs_modified_in_place`` says (see :class:`NonFiniteOrigin`). The inputs of
    a call that received non-finite values are summarized before it runs.

    Args:
        model: Constructed model whose registered modules are observed.
        run: Callable of no arguments that drives the forward (for example
            ``lambda: model(batch)``). Its return value is ignored.

    Returns:
        The origin, or None when every module call stayed finite.

    Raises:
        TypeError: ``model`` is not a module or ``run`` is not callable.
        Exception: whatever ``run`` raises, after the hooks are removed.
    """
    _check_model(model)
    _check_callable(run, "takes no arguments and drives the forward")
    checks = _FiniteCache()
    cache = _SummaryCache()
    counts: dict[str, int] = {}
    # Per (thread, path): calls in flight with their index, inputs, their versions and
    # whether they were all finite.
    pending: dict[tuple[int, str], list[tuple[int, _Found, tuple[int, ...] | None, bool]]] = {}
    # (path, call index, inputs, outputs, inputs modified in place) of the true origin and
    # of the first call that received non-finite inputs (its outputs are filled in when
    # it returns).
    origin: list[_Call] = []
    tainted: list[_Call] = []
    propagated: dict[str, None] = {}
    lock = threading.Lock()

    def pre(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = _input_tensors(args, kwargs)
        finite = all(checks.finite(tensor) for _, tensor in inputs)
        with lock:
            index = counts.get(label, 0)
            counts[label] = index + 1
            pending.setdefault((threading.get_ident(), label), []).append(
                (index, inputs, _versions(inputs), finite)
            )
            if not finite and not tainted:
                tainted.append((label, index, _traces(cache, inputs), (), False))

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        with lock:
            stack = pending.get((threading.get_ident(), label))
            if not stack:
                return
            index, inputs, versions, finite_inputs = stack.pop()
        outputs = list(_floating_tensors(output, "output"))
        finite = all(checks.finite(tensor) for _, tensor in outputs)
        with lock:
            if tainted and tainted[0][:2] == (label, index):
                tainted[0] = (label, index, tainted[0][2], _traces(cache, outputs), False)
            if finite:
                return
            if not origin and finite_inputs:
                now = _versions(inputs)
                modified = None if versions is None or now is None else now != versions
                origin.append(
                    (label, index, _traces(cache, inputs), _traces(cache, outputs), modified)
                )
            else:
                propagated.setdefault(label, None)

    targets = _labelled_modules(model, None)
    try:
        with _module_hooks(targets, pre, post):
            run()
    finally:
        pending.clear()  # calls that never returned must not keep their inputs alive
    found, input_nonfinite = (
        (origin[0], False) if origin else (tainted[0], True) if tainted else (None, False)
    )
    if found is None:
        return None
    label, index, inputs, outputs, modified = found
    spread = tuple(path for path in propagated if path != label)
    return NonFiniteOrigin(label, index, inputs, outputs, spread, input_nonfinite, modified)


# --------------------------------------------------------------------------- model diff


class _Abort(BaseException):
    """Unwinds the other model's forward once one side failed or went out of step."""


class _Lockstep:
    """Rendezvous of the two forwards at every paired module return.

    Model A's hook parks its output and waits; model B's hook, at the same
    module call, compares both outputs while A is parked, then lets A go on.
    So at most one pair of outputs is referenced by the comparison at a time,
    and nothing is copied or retained between calls.
    """

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.parked: tuple[tuple[str, int], Any] | None = None
        self.done_a = False
        self.done_b = False
        self.failure: str | None = None
        self.diffs: list[ModuleDiff] = []

    def fail(self, message: str) -> None:
        with self.condition:
            if self.failure is None:
                self.failure = message
            self.condition.notify_all()

    def arrive_a(self, key: tuple[str, int], output: Any) -> None:
        with self.condition:
            self._wait(lambda: self.parked is None)
            self.parked = (key, output)
            self.condition.notify_all()
            self._wait(lambda: self.parked is None or self.done_b)
            if self.parked is not None:
                self.failure = (
                    f"model A returned from {key[0]!r} (call {key[1]}) after model B's forward "
                    "had finished: the two forwards do not run the same module calls"
                )
                self.parked = None
                self.condition.notify_all()
                raise _Abort

    def arrive_b(self, key: tuple[str, int], output: Any) -> None:
        with self.condition:
            self._wait(lambda: self.parked is not None or self.done_a)
            if self.parked is None:
                self.failure = (
                    f"model B called {key[0]!r} (call {key[1]}) after model A's forward had "
                    "finished: the two forwards do not run the same module calls"
                )
                self.condition.notify_all()
                raise _Abort
            parked_key, output_a = self.parked
            if parked_key != key:
                self.failure = (
                    f"the forwards went out of step: model A returned from {parked_key[0]!r} "
                    f"(call {parked_key[1]}) where model B returned from {key[0]!r} (call "
                    f"{key[1]}); compare_models needs the same module calls in the same order"
                )
                self.condition.notify_all()
                raise _Abort
        try:
            self.diffs.append(_module_diff(key[0], key[1], output_a, output))
        except BaseException as error:
            self.fail(f"comparing {key[0]!r} (call {key[1]}) failed: {error}")
            raise _Abort from error
        finally:
            with self.condition:
                self.parked = None
                self.condition.notify_all()

    def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self.failure is not None:
                raise _Abort
            self.condition.wait()
        if self.failure is not None:
            raise _Abort


def compare_models(
    model_a: nn.Module,
    model_b: nn.Module,
    run: Callable[[nn.Module], object],
    module_paths: Sequence[str] | None = None,
) -> ModelDiff:
    """Compare two models module by module on the same input.

    ``run(model)`` drives one forward (for example ``lambda m: m(batch)``); it is
    called once for each model. Modules are paired by registered path, calls by
    their per-path index; both forwards must make the same paired calls in the
    same order (two checkpoints of one architecture, or a model before and after
    an edit), otherwise a ``ValueError`` names where they went out of step.

    Memory budget: the two forwards run in lockstep rather than one after the
    other. Model A's forward runs in the calling thread and model B's in a
    worker thread; at each paired module return the first model waits until the
    other reaches the same call, the two live outputs are compared, and both go
    on. No activation is copied or kept, so the extra memory is the comparison's
    float64 blocks (at most 3 x :data:`~vinlens.model_inspection.summary.BLOCK_ELEMENTS`
    x 8 bytes, 24 MiB) plus one small record per paired call, whatever the size
    of the models; the forwards themselves hold what they would hold when run
    alone, both at once. Gradient and inference modes, the torch thread count and
    the current CUDA device of the calling thread apply to both forwards; enter
    any autocast inside ``run``.

    Args:
        model_a: Reference model (``relative_l2`` divides by its output's norm).
        model_b: Model compared against it; may be ``model_a`` itself.
        run: Callable that takes a model and drives its forward on the shared input.
        module_paths: Paths to compare, or None for every path registered in both models.

    Returns:
        The per-call differences in execution order (the order calls return).

    Raises:
        TypeError: a model is not a module or ``run`` is not callable.
        ValueError: an unknown path, or forwards that do not make the same calls.
        Exception: whatever ``run`` raises, after every hook is removed.
    """
    _check_model(model_a, "model_a")
    _check_model(model_b, "model_b")
    _check_callable(run, "takes a model and drives its forward")
    paths_a = dict(_labelled_modules(model_a, None))
    paths_b = dict(_labelled_modules(model_b, None))
    if module_paths is None:
        paired = [path for path in paths_a if path in paths_b]
    else:
        wanted = [label for label, _ in _labelled_modules(model_a, module_paths)]
        missing = [path for path in wanted if path not in paths_b]
        if missing:
            raise ValueError(
                f"module path(s) {', '.join(repr(p) for p in missing)} exist in model_a "
                "but not in model_b"
            )
        paired = wanted
    unpaired = tuple(
        [p for p in paths_a if p not in paths_b] + [p for p in paths_b if p not in paths_a]
    )
    step = _Lockstep()
    counts: dict[tuple[str, str], int] = {}
    thread_a = threading.get_ident()
    grad_enabled = torch.is_grad_enabled()
    inference = torch.is_inference_mode_enabled()
    # OpenMP thread counts are per thread: a new thread would otherwise use every core.
    threads = torch.get_num_threads()
    # So is the current CUDA device: model B's run must see the caller's.
    cuda_device = (
        torch.cuda.current_device()
        if torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        else None
    )

    def hook_for(side: str) -> Callable[[str, tuple[Any, ...], Any], None]:
        arrive = step.arrive_a if side == "a" else step.arrive_b

        def post(label: str, args: tuple[Any, ...], output: Any) -> None:
            # The same model passed twice carries both sides' hooks: keep the caller's.
            if (threading.get_ident() == thread_a) != (side == "a"):
                return
            key = (side, label)
            index = counts.get(key, 0)
            counts[key] = index + 1
            arrive((label, index), output)

        return post

    def run_b() -> None:
        try:
            torch.set_num_threads(threads)
            if cuda_device is not None:
                torch.cuda.set_device(cuda_device)
            with torch.inference_mode(inference), torch.set_grad_enabled(grad_enabled):
                run(model_b)
        except _Abort:
            return
        except BaseException as error:
            failure_b.append(error)
            step.fail(f"run(model_b) raised {type(error).__name__}: {error}")
            return
        with step.condition:
            step.done_b = True
            step.condition.notify_all()

    failure_b: list[BaseException] = []
    targets_a = [(path, paths_a[path]) for path in paired]
    targets_b = [(path, paths_b[path]) for path in paired]
    worker = threading.Thread(target=run_b, name="vinlens-compare-model-b", daemon=True)
    with (
        _instance_hooks(targets_a, None, hook_for("a")),
        _instance_hooks(targets_b, None, hook_for("b")),
    ):
        try:
            worker.start()
            try:
                run(model_a)
            except _Abort:
                pass
            finally:
                with step.condition:
                    step.done_a = True
                    step.condition.notify_all()
        except BaseException:
            step.fail("model A's forward stopped")
            worker.join()
            raise
        worker.join()
    if failure_b:
        raise failure_b[0]
    if step.failure is not None:
        raise ValueError(step.failure)
    return ModelDiff(modules=tuple(step.diffs), unpaired_paths=unpaired)


def _module_diff(path: str, index: int, output_a: Any, output_b: Any) -> ModuleDiff:
    tensors_a = list(_floating_tensors(output_a, "output"))
    tensors_b = list(_floating_tensors(output_b, "output"))
    layout_a = [(p, tuple(t.shape)) for p, t in tensors_a]
    layout_b = [(p, tuple(t.shape)) for p, t in tensors_b]
    if layout_a != layout_b:
        raise ValueError(
            f"outputs of {path!r} differ in structure or shape: {layout_a} vs {layout_b}"
        )
    summary_a, summary_b = SummaryAccumulator(), SummaryAccumulator()
    max_abs = 0.0
    diff_sq = norm_a_sq = norm_b_sq = dot = 0.0
    for (_, a), (_, b) in zip(tensors_a, tensors_b, strict=True):
        finite_before = summary_a.finite + summary_b.finite
        summary_a.update(a)
        summary_b.update(b)
        all_finite = summary_a.finite + summary_b.finite - finite_before == 2 * a.numel()
        pairs = _finite_pair_moments if all_finite else _pair_moments
        for block_max, block_diff, block_a, block_b, block_dot in pairs(a, b):
            max_abs = block_max if math.isnan(block_max) else max(max_abs, block_max)
            diff_sq += block_diff
            norm_a_sq += block_a
            norm_b_sq += block_b
            dot += block_dot
            if math.isnan(max_abs):
                break
    if diff_sq == 0.0:
        relative = 0.0
    elif norm_a_sq == 0.0:
        relative = math.inf
    else:
        relative = math.sqrt(diff_sq) / math.sqrt(norm_a_sq)
    if math.isnan(max_abs):
        relative = math.nan
    if norm_a_sq == 0.0 and norm_b_sq == 0.0:
        cosine = 1.0
    elif norm_a_sq == 0.0 or norm_b_sq == 0.0:
        cosine = 0.0
    else:
        cosine = dot / (math.sqrt(norm_a_sq) * math.sqrt(norm_b_sq))
    return ModuleDiff(
        module_path=path,
        call_index=index,
        max_abs_diff=max_abs,
        relative_l2=relative,
        cosine=cosine,
        summary_a=summary_a.finish(),
        summary_b=summary_b.finish(),
    )


def _finite_pair_moments(
    a: torch.Tensor, b: torch.Tensor
) -> Iterator[tuple[float, float, float, float, float]]:
    """:func:`_pair_moments` for two all-finite outputs: reductions in the source dtype.

    One temporary per block (the difference); norms and products are dot products
    of the blocks themselves, accumulated by the backend in the source precision.
    """
    a = a.detach()
    b = b.detach()
    if a.device != b.device:
        b = b.to(a.device)
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float64):
        yield from _pair_moments(a, b)
        return
    rows: list[torch.Tensor] = []
    for block_a, block_b in zip(
        _blocks(a, BLOCK_ELEMENTS), _blocks(b, BLOCK_ELEMENTS), strict=True
    ):
        flat_a = block_a.reshape(-1)  # a view when the block is one run of memory
        flat_b = block_b.reshape(-1)
        delta = flat_a - flat_b
        rows.append(
            torch.stack(
                [
                    torch.maximum(delta.amax(), -delta.amin()) if delta.numel() else delta.sum(),
                    torch.dot(delta, delta),
                    torch.dot(flat_a, flat_a),
                    torch.dot(flat_b, flat_b),
                    torch.dot(flat_a, flat_b),
                ]
            ).to(torch.float64)
        )
    if not rows:
        return
    for row in torch.stack(rows).tolist():
        yield row[0], row[1], row[2], row[3], row[4]


def _pair_moments(
    a: torch.Tensor, b: torch.Tensor
) -> Iterator[tuple[float, float, float, float, float]]:
    """(max |a-b|, ||a-b||^2, ||a||^2, ||b||^2, <a,b>) per bounded float64 block pair.

    Equal values (NaN and infinities included) differ by zero; non-finite values
    are left out of norms and products so one infinity does not hide the rest.
    """
    a = a.detach()
    b = b.detach()
    if a.device != b.device:
        b = b.to(a.device)
    f64 = torch.float64
    rows: list[torch.Tensor] = []
    for block_a, block_b in zip(
        _blocks(a, BLOCK_ELEMENTS), _blocks(b, BLOCK_ELEMENTS), strict=True
    ):
        wide_a = block_a.to(f64)
        wide_b = block_b.to(f64)
        same = (wide_a == wide_b) | (torch.isnan(wide_a) & torch.isnan(wide_b))
        delta = torch.where(same, 0.0, wide_a - wide_b).abs()
        finite_a = torch.where(torch.isfinite(wide_a), wide_a, 0.0)
        finite_b = torch.where(torch.isfinite(wide_b), wide_b, 0.0)
        rows.append(
            torch.stack(
                [
                    delta.amax() if delta.numel() else delta.new_zeros(()),
                    torch.where(torch.isfinite(delta), delta, 0.0).square().sum(),
                    finite_a.square().sum(),
                    finite_b.square().sum(),
                    (finite_a * finite_b).sum(),
                ]
            )
        )
    if not rows:
        return
    for row in torch.stack(rows).tolist():
        yield row[0], row[1], row[2], row[3], row[4]


# --------------------------------------------------------------------------- streaming stats


def _default_run(model: nn.Module, batch: Any) -> object:
    return model(batch)


def collect_activation_stats(
    model: nn.Module,
    batches: Iterable[_Batch],
    run: Callable[[nn.Module, _Batch], object] | None = None,
    module_paths: Sequence[str] | None = None,
) -> ActivationStats:
    """Summarize each module's outputs over every batch of a stream.

    Each batch is driven through ``run(model, batch)`` (default ``model(batch)``)
    while one hook per module folds its floating outputs into a per-path
    :class:`ActivationAccumulator` on the outputs' device. Nothing per batch is
    kept, so memory is independent of the number of batches; batches are read
    lazily, so a ``DataLoader`` streams.

    Args:
        model: Constructed model whose registered modules are observed.
        batches: Any iterable of batches (a ``DataLoader``, a generator, a list).
        run: Callable taking the model and one batch that drives its forward.
        module_paths: Paths to summarize, or None for every registered module.

    Returns:
        Per-path summaries over every call of every batch, and the batch count.

    Raises:
        TypeError: bad model, run or batches.
        ValueError: unknown module paths.
        Exception: whatever ``run`` or the iterator raises, after hooks are removed.
    """
    _check_model(model)
    if run is None:
        run = _default_run
    _check_callable(run, "takes the model and one batch and drives the forward")
    if not isinstance(batches, Iterable):
        raise TypeError(f"batches must be an iterable of batches, got {type(batches).__qualname__}")
    targets = _labelled_modules(model, module_paths)
    accumulator = ActivationAccumulator()

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        accumulator.update(label, output)

    with _module_hooks(targets, None, post):
        for batch in batches:
            run(model, batch)
            accumulator.batches += 1
    return accumulator.finish()
