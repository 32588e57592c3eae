"""Saving and restoring a model's mutable state around an explanation (bottom module).

A notebook user explains a live training model and must get it back untouched: every
module's ``training`` flag, every parameter's ``requires_grad`` flag and, where a method
needs it, every parameter's ``.grad`` are saved individually and restored in ``finally``.
This module imports nothing else of :mod:`vinlens.attribution`, so targets, capture and
methods can all use it without an import circle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from torch import nn

__all__ = ["explanation_mode", "saved_grads", "saved_requires_grad", "saved_training_flags"]


@contextmanager
def saved_training_flags(model: nn.Module) -> Iterator[None]:
    """Restore each module's own ``training`` flag on exit (mixed train/eval included)."""
    flags = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


@contextmanager
def saved_requires_grad(model: nn.Module) -> Iterator[None]:
    """Restore each parameter's ``requires_grad`` flag on exit."""
    flags = [(parameter, parameter.requires_grad) for parameter in model.parameters()]
    try:
        yield
    finally:
        for parameter, requires_grad in flags:
            parameter.requires_grad_(requires_grad)


@contextmanager
def saved_grads(model: nn.Module) -> Iterator[None]:
    """Restore each parameter's ``.grad`` (the same tensor object, or None) on exit.

    The saved tensors are the originals, not copies: a method that accumulates into
    ``.grad`` in place would change them, so methods here never do; this guards against
    a ``score`` that calls ``backward()`` itself and so replaces or creates ``.grad``.
    """
    grads = [(parameter, parameter.grad) for parameter in model.parameters()]
    try:
        yield
    finally:
        for parameter, grad in grads:
            parameter.grad = grad


@contextmanager
def explanation_mode(model: nn.Module, *, enable_parameter_grads: bool) -> Iterator[None]:
    """Put ``model`` in eval mode (and optionally make parameters require grad) for the block.

    Each module's ``training`` flag and each parameter's ``requires_grad`` flag is
    saved individually and restored in ``finally``, so a model with frozen parts or
    batch-norm layers deliberately kept in eval comes back exactly as it was.
    """
    with ExitStack() as stack:
        stack.enter_context(saved_training_flags(model))
        stack.enter_context(saved_requires_grad(model))
        model.eval()
        if enable_parameter_grads:
            for parameter in model.parameters():
                parameter.requires_grad_(True)
        yield
