"""Forward origin: the first module call whose inputs were finite and whose output is not."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from vinlens.health.summaries import (
    MAX_WALK_DEPTH,
    MAX_WALK_NODES,
    Found,
    TensorTrace,
    check_callable,
    check_model,
    input_tensors,
    labelled_modules,
    output_tensors,
    reducible,
    tensor_traces,
)
from vinlens.hooks import CallPairing, HookSet
from vinlens.model_inspection.summary import FiniteCache, SummaryCache
from vinlens.wrappers import run_eagerly

__all__ = ["ForwardOriginWatch", "NonFiniteOrigin", "find_nonfinite_origin"]

_Call = tuple[str, int, tuple[TensorTrace, ...], tuple[TensorTrace, ...], bool | None]


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
        walk_truncated: Paths of module calls whose inputs or outputs held more
            containers and tensors than one walk visits (``MAX_WALK_NODES`` nodes,
            ``MAX_WALK_DEPTH`` levels, in :mod:`vinlens.health.summaries`), in order of
            first occurrence: values past the limit were not checked.
    """

    module_path: str
    call_index: int
    inputs: tuple[TensorTrace, ...]
    outputs: tuple[TensorTrace, ...]
    propagated_to: tuple[str, ...]
    input_nonfinite: bool
    inputs_modified_in_place: bool | None = False
    walk_truncated: tuple[str, ...] = ()


def _versions(tensors: Found) -> tuple[int, ...] | None:
    """Version counters of ``tensors``; None when one has none (an inference tensor)."""
    versions = []
    for _, tensor in tensors:
        if tensor.is_inference():
            return None
        versions.append(tensor._version)
    return tuple(versions)


def _all_finite(checks: FiniteCache, tensors: Found) -> bool:
    """True when every tensor of ``tensors`` holds only finite values (stops at the first
    that does not, as ``all`` does); a loop, not a generator, in a per-call hook."""
    for _, tensor in tensors:  # noqa: SIM110
        if not checks.finite(reducible(tensor)):
            return False
    return True


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
    ``input_nonfinite=True``. Only the module calls of the thread that calls this
    function are observed: another thread forwarding the same model meanwhile (a
    server) is not, nor are calls traced or on fake tensors.

    Only the reported call is summarized, so a finite forward costs one check per
    tensor. The origin's inputs are summarized when it returns: a module that
    modified them in place (``x.log_()``) leaves its changed values there, which
    ``inputs_modified_in_place`` says (see :class:`NonFiniteOrigin`). The inputs of
    a call that received non-finite values are summarized before it runs.

    Args:
        model: Constructed model whose registered modules are observed.
        run: Callable of no arguments that drives the forward (for example
            ``lambda: model(batch)``). Its return value is ignored.

    Complex tensors are checked too (a NaN or infinity in either part counts), and
    float8 tensors through an exact float16 copy. A walk of one call's inputs or
    outputs visits at most ``MAX_WALK_NODES`` containers and tensors; calls past that
    limit are listed in ``walk_truncated``, and a None answer with such calls warns
    (``RuntimeWarning``) instead of claiming every value was finite.

    Returns:
        The origin, or None when every module call stayed finite.

    Raises:
        TypeError: ``model`` is not a module or ``run`` is not callable.
        Exception: whatever ``run`` raises, after the hooks are removed.
    """
    check_model(model)
    check_callable(run, "takes no arguments and drives the forward")
    watch = ForwardOriginWatch()
    targets = labelled_modules(model, None)
    try:
        with run_eagerly(), HookSet() as hooks:
            hooks.hook_modules(targets, watch.pre, watch.post, own_thread=True)
            run()
    finally:
        watch.clear()  # calls that never returned must not keep their inputs alive
    found = watch.result()
    if found is None and watch.walk_truncated:
        paths = list(watch.walk_truncated)
        warnings.warn(
            "find_nonfinite_origin found no NaN or Inf, but the inputs or outputs of "
            f"{', '.join(repr(p) for p in paths[:5])}{', ...' if len(paths) > 5 else ''} held "
            f"more than {MAX_WALK_NODES} containers and tensors (or were nested deeper than "
            f"{MAX_WALK_DEPTH}); values past that limit were not checked",
            RuntimeWarning,
            stacklevel=2,
        )
    return found


class ForwardOriginWatch:
    """The forward half of :func:`find_nonfinite_origin`, fed by labelled module hooks.

    ``pre(label, args, kwargs)`` before each module call and ``post(label, args, output)``
    when it returns; :meth:`result` names the origin. The gradient origin of a training
    step feeds the same watch from its own hooks, so both answer the forward alike.
    """

    def __init__(self) -> None:
        self.checks = FiniteCache()
        self.cache = SummaryCache()
        # Calls in flight, per thread, with their inputs, their versions and whether they
        # were all finite.
        self.calls: CallPairing[tuple[Found, tuple[int, ...] | None, bool]] = CallPairing()
        # (path, call index, inputs, outputs, inputs modified in place) of the true origin
        # and of the first call that received non-finite inputs (its outputs are filled in
        # when it returns).
        self.origin: list[_Call] = []
        self.tainted: list[_Call] = []
        self.propagated: dict[str, None] = {}
        self.walk_truncated: dict[str, None] = {}
        self.lock = threading.Lock()

    def truncated(self, label: str) -> None:
        """Note that a walk of ``label``'s inputs or outputs stopped at its limits."""
        with self.lock:
            self.walk_truncated.setdefault(label, None)

    def pre(self, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Check a call's inputs as it begins."""
        self.begin(label, args, kwargs)

    def begin(self, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """:meth:`pre`, returning the call's index (per path, in the order calls begin)."""
        inputs = input_tensors(
            args, kwargs, complex_too=True, truncated=lambda: self.truncated(label)
        )
        finite = _all_finite(self.checks, inputs)
        index = self.calls.begin(label, args, (inputs, _versions(inputs), finite))
        if not finite:
            with self.lock:
                if not self.tainted:
                    traces = tensor_traces(self.cache, inputs)
                    self.tainted.append((label, index, traces, (), False))
        return index

    def post(self, label: str, args: tuple[Any, ...], output: Any) -> None:
        """Check a call's outputs as it returns."""
        call = self.calls.end(label, args)
        if call is None:
            return
        index, (inputs, versions, finite_inputs) = call
        outputs = output_tensors(output, complex_too=True, truncated=lambda: self.truncated(label))
        finite = _all_finite(self.checks, outputs)
        if finite and not self.tainted:
            return  # the common call: nothing to record
        with self.lock:
            tainted = self.tainted
            if tainted and tainted[0][:2] == (label, index):
                traces = tensor_traces(self.cache, outputs)
                tainted[0] = (label, index, tainted[0][2], traces, False)
            if finite:
                return
            if not self.origin and finite_inputs:
                now = _versions(inputs)
                modified = None if versions is None or now is None else now != versions
                self.origin.append(
                    (
                        label,
                        index,
                        tensor_traces(self.cache, inputs),
                        tensor_traces(self.cache, outputs),
                        modified,
                    )
                )
            else:
                self.propagated.setdefault(label, None)

    def clear(self) -> None:
        """Drop the calls still in flight (their inputs)."""
        self.calls.clear()

    def result(self) -> NonFiniteOrigin | None:
        """The origin seen so far, or None when every call stayed finite."""
        found, input_nonfinite = (
            (self.origin[0], False)
            if self.origin
            else (self.tainted[0], True)
            if self.tainted
            else (None, False)
        )
        if found is None:
            return None
        label, index, inputs, outputs, modified = found
        spread = tuple(path for path in self.propagated if path != label)
        return NonFiniteOrigin(
            label,
            index,
            inputs,
            outputs,
            spread,
            input_nonfinite,
            modified,
            tuple(self.walk_truncated),
        )
