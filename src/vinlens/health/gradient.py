"""Where a non-finite gradient was made: :func:`find_nonfinite_gradient_origin`.

The backward pass of a training step is watched module by module. A module's
*incoming* gradient is the gradient of the loss with respect to its outputs
(``grad_output``); its *outgoing* gradients are those it sends to its inputs and to
its own parameters. The origin is the first module, in the order the backward pass
reaches modules, whose incoming gradient is finite and whose outgoing gradients are
not: the module whose own backward made the NaN or the infinity.

How it is observed, without changing any value or gradient:

* forward pre-hooks hand each module a fresh view (``x.view_as(x)``) of every input
  tensor that requires grad, with a tensor hook on the view: that hook receives
  exactly the gradient this module sends to that input, even when the input is also
  used elsewhere (a residual). A view, not a copy: an in-place module still modifies
  its caller's tensor, and autograd handles in-place changes of views
  (``register_full_backward_hook`` would refuse the in-place ``ReLU`` after a
  ``BatchNorm``);
* forward hooks put a tensor hook on every floating output that requires grad (its
  incoming gradient), and check the forward for NaN and Inf on the way;
* a tensor hook on every parameter sees its gradient of this backward before it is
  accumulated into ``.grad``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.health.origin import ForwardOriginWatch, NonFiniteOrigin
from vinlens.health.summaries import (
    Found,
    TensorTrace,
    check_callable,
    check_model,
    floating_tensors,
    labelled_modules,
)
from vinlens.hooks import HookSet
from vinlens.model_inspection import ROOT_PATH, summarize_tensor
from vinlens.model_inspection.summary import FiniteCache
from vinlens.wrappers import named_parameters, run_eagerly

__all__ = ["GradientOrigin", "find_nonfinite_gradient_origin"]


@dataclass(frozen=True)
class GradientOrigin:
    """The module whose backward first made a NaN or an infinity.

    Attributes:
        module_path: Registered path of the module (``"<root>"`` for the model itself).
        call_index: Zero-based index of the call (of this path, in forward order).
        grad_outputs: The call's incoming gradients (w.r.t. its floating outputs, paths
            such as ``output`` or ``output[1]``), in order of arrival; finite unless the
            gradient was already non-finite where it entered the model (then this is the
            first module it reached).
        grad_inputs: The gradients the call sent to its inputs that require grad (paths
            such as ``args[0]`` or ``kwargs['x']``), in order of arrival.
        parameter_paths: The module's own parameters whose gradient from this backward
            holds NaN or Inf, as full dotted names (``"lin.weight"``).
        propagated_to: Paths of the other modules whose gradients (incoming, outgoing or
            of their parameters) held NaN or Inf, in the order the backward reached them,
            each once.
        forward_origin: When the forward already held NaN or Inf, its origin (the
            backward only spread it), and ``module_path`` and ``call_index`` are that
            call's; None when the forward stayed finite.
    """

    module_path: str
    call_index: int
    grad_outputs: tuple[TensorTrace, ...]
    grad_inputs: tuple[TensorTrace, ...]
    parameter_paths: tuple[str, ...]
    propagated_to: tuple[str, ...]
    forward_origin: NonFiniteOrigin | None = None

    @property
    def entered_nonfinite(self) -> bool:
        """True when the gradient was already NaN or Inf where it entered the model.

        Then no module's backward made it: the loss (or code outside the registered
        modules, between the output and ``backward``) did, and ``module_path`` is only the
        first module it reached. False when a module made it (or the forward did).
        """
        return self.forward_origin is None and any(
            t.summary.nan_count or t.summary.posinf_count or t.summary.neginf_count
            for t in self.grad_outputs
        )


def _traces(found: Found) -> tuple[TensorTrace, ...]:
    return tuple(
        TensorTrace(path, tuple(t.shape), str(t.dtype), summarize_tensor(t.detach()))
        for path, t in found
    )


def _wrappable(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad and value.is_floating_point()


class _Call:
    """One module call's backward: its gradients, kept only while it could be reported."""

    __slots__ = (
        "arrived",
        "bad_parameters",
        "grad_inputs",
        "grad_outputs",
        "index",
        "inputs_open",
        "keep",
        "outputs_finite",
        "parameters_open",
        "path",
    )

    def __init__(self, path: str, index: int, parameters: int) -> None:
        self.path = path
        self.index = index
        self.grad_outputs: Found = []
        self.grad_inputs: Found = []
        self.bad_parameters: list[str] = []
        self.outputs_finite = True
        self.inputs_open = 0
        # A parameter's gradient is accumulated once per backward, after every call of that
        # backward that used it: it belongs to the first of those calls, the one the
        # backward reaches last (see _StepWatch.parameter_calls).
        self.parameters_open = parameters
        self.arrived = False  # a gradient of this call arrived: its backward has run
        self.keep = False

    @property
    def settled(self) -> bool:
        """Every outgoing gradient arrived, so the call can no longer become the origin."""
        return self.inputs_open <= 0 and self.parameters_open <= 0


class _StepWatch:
    """The backward half: which call first made a non-finite gradient, and who it reached."""

    def __init__(self, model: nn.Module, hooks: HookSet) -> None:
        self.hooks = hooks
        self.targets = labelled_modules(model, None)
        self.forward = ForwardOriginWatch()
        self.checks = FiniteCache()
        self.lock = threading.Lock()
        self.own_parameters: dict[str, int] = {}
        self.parameters: list[tuple[str, str, torch.Tensor]] = []
        for name, parameter in named_parameters(model):
            if parameter.requires_grad:
                owner = name.rpartition(".")[0] or ROOT_PATH
                self.parameters.append((name, owner, parameter))
                self.own_parameters[owner] = self.own_parameters.get(owner, 0) + 1
        # Per path, the call its parameters' gradients belong to: the first call, and again
        # each call made after the latest such call's backward ran (a step of several
        # forward/backward passes, as gradient accumulation runs them).
        self.parameter_calls: dict[str, _Call] = {}
        self.calls: dict[tuple[str, int], _Call] = {}
        self.open_calls: dict[tuple[int, str], list[_Call]] = {}
        self.origin: _Call | None = None
        self.entered: _Call | None = None  # first call whose incoming gradient was not finite
        self.reached: dict[str, _Call] = {}

    def arm(self) -> None:
        for name, owner, parameter in self.parameters:
            self.hooks.tensor(parameter, self._parameter_hook(name, owner))
        seen: set[int] = set()
        for label, module in self.targets:
            if id(module) in seen:
                continue
            seen.add(id(module))
            self.hooks.forward_pre(module, self._pre_hook(label), with_kwargs=True)
            self.hooks.forward(module, self._post_hook(label))

    # ------------------------------------------------------------------------- forward

    def _pre_hook(
        self, label: str
    ) -> Callable[
        [nn.Module, tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]] | None
    ]:
        def pre(
            _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            index = self.forward.begin(label, args, kwargs)
            with self.lock:
                owner = self.parameter_calls.get(label)
                new_owner = owner is None or owner.arrived
                call = _Call(label, index, self.own_parameters.get(label, 0) if new_owner else 0)
                if new_owner:
                    self.parameter_calls[label] = call
                self.calls[(label, index)] = call
                self.open_calls.setdefault((threading.get_ident(), label), []).append(call)
            wrap_args = any(_wrappable(a) for a in args)
            wrap_kwargs = any(_wrappable(v) for v in kwargs.values())
            if not (wrap_args or wrap_kwargs):
                return None
            # Only tensors passed directly are wrapped: one inside a container would need
            # the container rebuilt, and the module's other gradients still name it.
            new_args = tuple(
                self._wrap(call, f"args[{i}]", a) if _wrappable(a) else a
                for i, a in enumerate(args)
            )
            new_kwargs = {
                k: self._wrap(call, f"kwargs[{k!r}]", v) if _wrappable(v) else v
                for k, v in kwargs.items()
            }
            return new_args, new_kwargs

        return pre

    def _wrap(self, call: _Call, path: str, tensor: torch.Tensor) -> torch.Tensor:
        view = tensor.view_as(tensor)
        call.inputs_open += 1
        self.hooks.tensor(view, lambda grad: self.on_grad_input(call, path, grad))
        return view

    def _post_hook(self, label: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def post(_module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            self.forward.post(label, args, output)
            with self.lock:
                stack = self.open_calls.get((threading.get_ident(), label))
                if not stack:
                    return
                call = stack.pop()
                # The forward's own origin is reported with its backward: keep its gradients.
                for found in (self.forward.origin, self.forward.tainted):
                    if found and found[0][:2] == (label, call.index):
                        call.keep = True
            for path, tensor in floating_tensors(output, "output"):
                if tensor.requires_grad:
                    self.hooks.tensor(tensor, self._output_hook(call, path))

        return post

    def _output_hook(self, call: _Call, path: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self.on_grad_output(call, path, grad)

        return hook

    def _parameter_hook(self, name: str, owner: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self.on_grad_parameter(name, owner, grad)

        return hook

    # ------------------------------------------------------------------------ backward

    def on_grad_output(self, call: _Call, path: str, grad: torch.Tensor) -> None:
        finite = self.checks.finite(grad)
        with self.lock:
            call.arrived = True
            if not finite:
                call.outputs_finite = False
                if self.entered is None and self.origin is None:
                    self.entered = call
                    call.keep = True
                self.reached.setdefault(call.path, call)
            if call.keep or (self.origin is None and not call.settled):
                call.grad_outputs.append((path, grad))

    def on_grad_input(self, call: _Call, path: str, grad: torch.Tensor) -> None:
        finite = self.checks.finite(grad)
        with self.lock:
            call.arrived = True
            call.inputs_open -= 1
            if call.keep or self.origin is None:
                call.grad_inputs.append((path, grad))
            if not finite:
                self._blame(call)
            self._settle(call)

    def on_grad_parameter(self, name: str, owner: str, grad: torch.Tensor) -> None:
        if grad.is_sparse:  # nn.Embedding(sparse=True): check the stored values
            grad = grad.coalesce().values()
        finite = self.checks.finite(grad)
        with self.lock:
            call = self.parameter_calls.get(owner)
            if call is None:  # the owner never ran as a module call: a parameter used directly
                call = self.parameter_calls[owner] = _Call(owner, 0, self.own_parameters[owner])
            call.arrived = True
            call.parameters_open -= 1
            if not finite:
                call.bad_parameters.append(name)
                self._blame(call)
            self._settle(call)

    def _blame(self, call: _Call) -> None:
        if self.origin is None and call.outputs_finite:
            self.origin = call
            call.keep = True
        self.reached.setdefault(call.path, call)

    def _settle(self, call: _Call) -> None:
        # Drop what can no longer be reported, so the backward does not keep every
        # activation's gradient alive until it ends.
        if call.settled and not call.keep:
            call.grad_outputs = []
            call.grad_inputs = []

    # -------------------------------------------------------------------------- result

    def result(self) -> GradientOrigin | None:
        if not self.reached:
            return None
        forward = self.forward.result()
        call: _Call | None = None
        if forward is not None:
            call = self.calls.get((forward.module_path, forward.call_index))
            if call is None:
                call = _Call(forward.module_path, forward.call_index, 0)
        else:
            call = self.origin or self.entered or next(iter(self.reached.values()))
        return GradientOrigin(
            module_path=call.path,
            call_index=call.index,
            grad_outputs=_traces(call.grad_outputs),
            grad_inputs=_traces(call.grad_inputs),
            parameter_paths=tuple(dict.fromkeys(call.bad_parameters)),
            propagated_to=tuple(p for p in self.reached if p != call.path),
            forward_origin=forward,
        )


def find_nonfinite_gradient_origin(
    model: nn.Module, step: Callable[[], object]
) -> GradientOrigin | None:
    """Run one training step and report the module whose backward first made NaN or Inf.

    ``step`` runs the forward and the backward itself, for example
    ``lambda: loss_fn(model(x), y).backward()``. The origin is the first module, in the
    order the backward reaches modules, whose incoming gradient (``grad_output``) is
    finite and whose outgoing gradients (w.r.t. its inputs) or whose own parameters'
    gradients hold NaN or Inf. When the forward already held NaN or Inf the backward only
    spreads it: then ``forward_origin`` is the forward's origin
    (:func:`find_nonfinite_origin`'s answer) and the record names that module call.

    Values and gradients are unchanged; the step costs one finiteness check per
    activation and per gradient (a sum, read on the host) plus the hooks' Python work,
    and only the reported call's gradients are summarized. Every hook is removed on
    every exit, exceptions included.

    Args:
        model: Constructed model whose registered modules are observed.
        step: Callable of no arguments that runs forward and backward.

    Returns:
        The origin, or None when every gradient of the step was finite.

    Raises:
        TypeError: ``model`` is not a module or ``step`` is not callable.
        Exception: whatever ``step`` raises, after every hook is removed.
    """
    check_model(model)
    check_callable(step, "takes no arguments and runs forward and backward")
    with run_eagerly(), HookSet() as hooks:
        watch = _StepWatch(model, hooks)
        try:
            watch.arm()
            step()
        finally:
            watch.forward.clear()
            watch.open_calls.clear()
    return watch.result()
