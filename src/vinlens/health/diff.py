"""Model diff: per-module drift between two models driven on the same input, in lockstep."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.health._diff_metrics import output_drift
from vinlens.health.summaries import check_callable, check_model, floating_tensors, labelled_modules
from vinlens.hooks import HookSet
from vinlens.model_inspection import TensorSummary
from vinlens.wrappers import run_eagerly

__all__ = ["ModelDiff", "ModuleDiff", "compare_models", "most_drifted"]


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
        cosine: Cosine similarity of ``a`` and ``b`` (1 when both are zero). For finite
            outputs it comes from the same blocks as ``relative_l2``
            (``1 - cos = (||a-b||^2 - (||a|| - ||b||)^2) / (2 ||a|| ||b||)``), so ``1 - cos``
            is accurate relative to itself even below 1e-6; otherwise from float64 blocks
            of the finite values.
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

    def most_drifted(self, k: int | None = None) -> tuple[ModuleDiff, ...]:
        """Per module path its most drifted call, the most drifted paths first.

        A path's calls are ranked by ``relative_l2``, NaN (one side non-finite) above
        every number; ties keep the earlier call. Paths are then ordered the same way,
        ties in execution order. ``k`` keeps the first ``k`` (None: every path).

        Raises:
            ValueError: ``k`` is not None or a non-negative int.
        """
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"k must be None or a non-negative int, got {k!r}")
        best: dict[str, ModuleDiff] = {}
        for module in self.modules:
            kept = best.get(module.module_path)
            if kept is None or _drift_key(module) > _drift_key(kept):
                best[module.module_path] = module
        ranked = sorted(best.values(), key=_drift_key, reverse=True)  # stable: ties in order
        return tuple(ranked if k is None else ranked[:k])


def _drift_key(module: ModuleDiff) -> float:
    value = float(module.relative_l2)
    return math.inf if math.isnan(value) else value


def most_drifted(diff: ModelDiff, k: int | None = None) -> tuple[ModuleDiff, ...]:
    """:meth:`ModelDiff.most_drifted`: per module path its most drifted call, most drifted
    paths first, the first ``k`` (None: all)."""
    if not isinstance(diff, ModelDiff):
        raise TypeError(f"diff must be a ModelDiff, got {type(diff).__qualname__}")
    return diff.most_drifted(k)


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
        self.last = _LastPair()

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
            self.diffs.append(_module_diff(key[0], key[1], output_a, output, self.last))
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

    Compiled models (``torch.compile(model)``, ``model.compile()``) and
    ``DistributedDataParallel`` models are compared by their original paths (no
    ``_orig_mod.`` or ``module.`` prefix), and both forwards run eagerly under
    ``torch.compiler.set_stance("force_eager")`` (see :mod:`vinlens.wrappers`).

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
    any autocast inside ``run``. Only those two threads' module calls are compared:
    ``run`` must drive the forward on the thread it is called on, and another
    thread forwarding either model meanwhile (a server) is not observed.

    Args:
        model_a: Reference model (``relative_l2`` divides by its output's norm).
        model_b: Model compared against it; may be ``model_a`` itself.
        run: Callable that takes a model and drives its forward on the shared input.
        module_paths: Paths to compare, or None for every path registered in both models.

    Returns:
        The per-call differences in execution order (the order calls return).

    Raises:
        TypeError: a model is not a module or ``run`` is not callable.
        ValueError: an unknown path, forwards that do not make the same calls, or a
            dropout module in train mode (both forwards draw from torch's one RNG at
            once, so seeding ``run`` cannot give them the same mask).
        Exception: whatever ``run`` raises, after every hook is removed.
    """
    check_model(model_a, "model_a")
    check_model(model_b, "model_b")
    check_callable(run, "takes a model and drives its forward")
    targets_a, targets_b, unpaired = _paired_targets(model_a, model_b, module_paths)
    step = _Lockstep()
    _run_lockstep(step, model_a, model_b, run, targets_a, targets_b)
    if step.failure is not None:
        raise ValueError(step.failure)
    return ModelDiff(modules=tuple(step.diffs), unpaired_paths=unpaired)


def _paired_targets(
    model_a: nn.Module, model_b: nn.Module, module_paths: Sequence[str] | None
) -> tuple[list[tuple[str, nn.Module]], list[tuple[str, nn.Module]], tuple[str, ...]]:
    """Both models' (path, module) targets, paired by path, and the unpaired paths."""
    paths_a = dict(labelled_modules(model_a, None))
    paths_b = dict(labelled_modules(model_b, None))
    if module_paths is None:
        paired = [path for path in paths_a if path in paths_b]
    else:
        paired = [label for label, _ in labelled_modules(model_a, module_paths)]
        missing = [path for path in paired if path not in paths_b]
        if missing:
            raise ValueError(
                f"module path(s) {', '.join(repr(p) for p in missing)} exist in model_a "
                "but not in model_b"
            )
    _refuse_train_mode_randomness(paths_a, "model_a")
    if model_b is not model_a:
        _refuse_train_mode_randomness(paths_b, "model_b")
    unpaired = [p for p in paths_a if p not in paths_b] + [p for p in paths_b if p not in paths_a]
    return (
        [(path, paths_a[path]) for path in paired],
        [(path, paths_b[path]) for path in paired],
        tuple(unpaired),
    )


def _callers_state() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """A context that gives another thread the calling thread's gradient and inference
    modes, torch thread count and current CUDA device (all per thread: a new thread would
    otherwise use every core and device 0)."""
    grad_enabled = torch.is_grad_enabled()
    inference = torch.is_inference_mode_enabled()
    threads = torch.get_num_threads()
    cuda_device = (
        torch.cuda.current_device()
        if torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        else None
    )

    @contextlib.contextmanager
    def apply() -> Iterator[None]:
        torch.set_num_threads(threads)
        if cuda_device is not None:
            torch.cuda.set_device(cuda_device)
        with torch.inference_mode(inference), torch.set_grad_enabled(grad_enabled):
            yield

    return apply


def _run_lockstep(
    step: _Lockstep,
    model_a: nn.Module,
    model_b: nn.Module,
    run: Callable[[nn.Module], object],
    targets_a: list[tuple[str, nn.Module]],
    targets_b: list[tuple[str, nn.Module]],
) -> None:
    """Drive model A's forward here and model B's in a worker thread, in lockstep.

    Each side's hooks observe only the thread that drives its forward (registered with
    ``own_thread`` on that thread): a module in both models carries both sides' hooks,
    and a third thread serving either model meanwhile is not compared.
    """
    counts: dict[tuple[str, str], int] = {}
    in_callers_state = _callers_state()

    def hook_for(side: str) -> Callable[[str, tuple[Any, ...], Any], None]:
        arrive = step.arrive_a if side == "a" else step.arrive_b

        def post(label: str, args: tuple[Any, ...], output: Any) -> None:
            key = (side, label)
            index = counts.get(key, 0)
            counts[key] = index + 1
            arrive((label, index), output)

        return post

    def run_b() -> None:
        try:
            with in_callers_state(), HookSet() as hooks_b:
                hooks_b.hook_modules(targets_b, post=hook_for("b"), own_thread=True)
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
    worker = threading.Thread(target=run_b, name="vinlens-compare-model-b", daemon=True)
    # Compiled forwards run eagerly (the stance is process-wide, so model B's thread too):
    # compiled code would not call the hooks, and dynamo must not trace them.
    with run_eagerly(), HookSet() as hooks:
        hooks.hook_modules(targets_a, post=hook_for("a"), own_thread=True)
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


_RANDOM_IN_TRAINING = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def _refuse_train_mode_randomness(modules: dict[str, nn.Module], name: str) -> None:
    random = [
        path
        for path, module in modules.items()
        if module.training
        and isinstance(module, _RANDOM_IN_TRAINING)
        and float(getattr(module, "p", 0.0)) > 0.0
    ]
    if random:
        shown = ", ".join(repr(path) for path in random[:5]) + (", ..." if len(random) > 5 else "")
        raise ValueError(
            f"{name} has dropout in train mode ({shown}): compare_models runs both forwards "
            "at once and they draw from torch's one random generator, so even a seeded run "
            "gives them different masks; call .eval() on both models (or set p=0)"
        )


class _LastPair:
    """The last pair of single-tensor outputs compared, by identity and version.

    A container module often returns its last child's output tensor itself (an
    ``nn.Sequential``, a residual block's final activation), so the call that returns
    next compares the very same two tensors, unchanged: their ``_version`` counters
    prove it (any in-place write bumps them) and weak references prove identity (an id
    can be reused once a tensor is freed). Only the last pair is kept, and no tensor is
    kept alive by it.
    """

    __slots__ = ("entry",)

    def __init__(self) -> None:
        self.entry: (
            tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int, int, ModuleDiff] | None
        ) = None

    def find(self, a: torch.Tensor, b: torch.Tensor) -> ModuleDiff | None:
        if self.entry is None:
            return None
        ref_a, ref_b, version_a, version_b, diff = self.entry
        if ref_a() is a and ref_b() is b and (a._version, b._version) == (version_a, version_b):
            return diff
        return None

    def keep(self, a: torch.Tensor, b: torch.Tensor, diff: ModuleDiff) -> None:
        # An inference tensor has no version counter to prove it unchanged.
        inference = a.is_inference() or b.is_inference()
        self.entry = (
            None if inference else (weakref.ref(a), weakref.ref(b), a._version, b._version, diff)
        )


def _module_diff(
    path: str, index: int, output_a: Any, output_b: Any, last: _LastPair
) -> ModuleDiff:
    tensors_a = list(floating_tensors(output_a, "output"))
    tensors_b = list(floating_tensors(output_b, "output"))
    if len(tensors_a) != 1 or len(tensors_b) != 1:
        return _compare_outputs(path, index, tensors_a, tensors_b)
    a, b = tensors_a[0][1], tensors_b[0][1]
    same = last.find(a, b)
    if same is not None:
        return dataclasses.replace(same, module_path=path, call_index=index)
    diff = _compare_outputs(path, index, tensors_a, tensors_b)
    last.keep(a, b, diff)
    return diff


def _compare_outputs(
    path: str,
    index: int,
    tensors_a: list[tuple[str, torch.Tensor]],
    tensors_b: list[tuple[str, torch.Tensor]],
) -> ModuleDiff:
    max_abs, relative, cosine, summary_a, summary_b = output_drift(path, tensors_a, tensors_b)
    return ModuleDiff(path, index, max_abs, relative, cosine, summary_a, summary_b)
