"""The model a diagnostic reports on, behind the wrappers training puts around it.

Every engine takes the object the caller trains (``torch.compile(model)``, a model
compiled in place with ``model.compile()``, a model holding compiled submodules) and
reports the paths of the original modules, as the eager model names them:

* :func:`unwrap_model` takes the wrappers off the root, in any order and nesting:
  ``torch.compile``'s ``OptimizedModule._orig_mod`` and ``DistributedDataParallel.module``
  (so ``DistributedDataParallel(torch.compile(model))`` and
  ``torch.compile(DistributedDataParallel(model))`` both give ``model``); this is the one
  place to teach another wrapper, and :func:`root_wrappers` lists what it took off;
* :func:`named_modules` and :func:`named_parameters` are the original tree's
  ``named_modules()``/``named_parameters()`` with every ``OptimizedModule`` folded away: a
  wrapper is not listed, and the ``_orig_mod`` segment it adds to its children's paths
  is dropped (``enc._orig_mod.lin`` reads ``enc.lin``);
* :func:`compiled_paths` names the compiled modules (for notes and warnings);
* :func:`run_eagerly` runs the diagnostic's own pass eagerly.

Why eagerly: hooks added after a module was compiled are not seen by the compiled code
(dynamo skips hook guards by default), and hooks present when dynamo traces are traced
with it (graph breaks, recompiles). So vinlens never lets dynamo see its hooks: each
hooked pass (a capture, an origin search, a sampled or replayed training step) runs
under ``torch.compiler.set_stance("force_eager")``, where every compiled function and
module runs its original Python code and every hook fires; outside those passes the
compiled code runs untouched and compiles exactly as often as without vinlens. The
stance is process-wide: while a pass holds it, other threads' compiled code runs
eagerly too. Holders are counted, so overlapping passes (two captures, a replay inside
a monitored step) restore the caller's stance only when the last one ends.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

__all__ = [
    "compiled_paths",
    "fold_module_walk",
    "hold_eager",
    "named_modules",
    "named_parameters",
    "root_wrappers",
    "run_eagerly",
    "unwrap_model",
]

_ROOT = "<root>"  # model_inspection.ROOT_PATH (this module sits below model_inspection)
_WRAPPED = "_orig_mod"  # OptimizedModule's attribute (and child name) for the original


def _optimized_module_type() -> type | None:
    """dynamo's ``OptimizedModule``, or None when dynamo was never imported (then no module
    can have been compiled: ``torch.compile`` imports it). Never imports it itself."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    found = getattr(eval_frame, "OptimizedModule", None)
    return found if isinstance(found, type) else None


def _is_wrapper(module: object, wrapper: type | None) -> bool:
    return wrapper is not None and isinstance(module, wrapper)


def _ddp_type() -> type | None:
    """``DistributedDataParallel``, or None when ``torch.nn.parallel`` was never imported
    (``torch.nn`` imports it, so in practice always found). Never imports it itself."""
    parallel = sys.modules.get("torch.nn.parallel.distributed")
    found = getattr(parallel, "DistributedDataParallel", None)
    return found if isinstance(found, type) else None


def _inner(model: nn.Module, compiled: type | None, ddp: type | None) -> nn.Module | None:
    """The module one root wrapper holds, or None when ``model`` is no wrapper."""
    if _is_wrapper(model, compiled):
        inner = getattr(model, _WRAPPED)
    elif _is_wrapper(model, ddp):
        inner = model.module
    else:
        return None
    return inner if isinstance(inner, nn.Module) else None


def root_wrappers(model: nn.Module) -> list[nn.Module]:
    """The wrappers :func:`unwrap_model` takes off ``model``, outermost first (``[]`` for
    a bare model): ``torch.compile``'s ``OptimizedModule`` and ``DistributedDataParallel``.
    """
    compiled, ddp = _optimized_module_type(), _ddp_type()
    found: list[nn.Module] = []
    inner = _inner(model, compiled, ddp)
    while inner is not None:
        found.append(model)
        model = inner
        inner = _inner(model, compiled, ddp)
    return found


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module whose paths vinlens reports: ``model`` with its root wrappers taken off.

    ``torch.compile(model)``, ``DistributedDataParallel(model)`` and any nesting of the
    two give ``model``; a model compiled in place (``model.compile()``) is its own
    original. Other objects are returned as they are.
    """
    compiled, ddp = _optimized_module_type(), _ddp_type()
    inner = _inner(model, compiled, ddp)
    while inner is not None:
        model = inner
        inner = _inner(model, compiled, ddp)
    return model


def _folded_names(
    pairs: list[tuple[str, Any]], wrapper_paths: set[str]
) -> Iterator[tuple[str, Any]]:
    """``pairs`` with the ``_orig_mod`` segment below each wrapper path dropped."""
    for name, value in pairs:
        if not wrapper_paths:
            yield name, value
            continue
        kept: list[str] = []
        raw = ""
        for segment in name.split("."):
            if not (segment == _WRAPPED and raw in wrapper_paths):
                kept.append(segment)
            raw = f"{raw}.{segment}" if raw else segment
        yield ".".join(kept), value


def _wrapper_paths(model: nn.Module, wrapper: type | None) -> set[str]:
    """Raw ``named_modules`` paths (aliases included) of the compile wrappers under ``model``."""
    if wrapper is None:
        return set()
    return {
        name
        for name, module in model.named_modules(remove_duplicate=False)
        if isinstance(module, wrapper)
    }


def fold_module_walk(
    model: nn.Module, pairs: list[tuple[str, nn.Module]]
) -> list[tuple[str, nn.Module]]:
    """A ``named_modules()``-style walk of the unwrapped ``model`` (``""`` for the root)
    with its compile wrappers folded away; ``pairs`` itself when there are none."""
    wrapper = _optimized_module_type()
    if wrapper is None or not any(isinstance(module, wrapper) for _, module in pairs):
        return pairs
    paths = _wrapper_paths(model, wrapper)
    return [
        (name, module)
        for name, module in _folded_names(pairs, paths)
        if not isinstance(module, wrapper)
    ]


def named_modules(
    model: nn.Module, *, remove_duplicate: bool = True
) -> list[tuple[str, nn.Module]]:
    """``named_modules()`` of the original model, compile wrappers folded away.

    The root is named ``""``, as in ``named_modules``.
    """
    original = unwrap_model(model)
    return fold_module_walk(
        original, list(original.named_modules(remove_duplicate=remove_duplicate))
    )


def named_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``named_parameters()`` of the original model, with the paths of :func:`named_modules`."""
    original = unwrap_model(model)
    pairs = list(original.named_parameters())
    paths = _wrapper_paths(original, _optimized_module_type())
    return list(_folded_names(pairs, paths)) if paths else pairs


def compiled_paths(model: nn.Module) -> tuple[str, ...]:
    """Paths (as :func:`named_modules` gives them, ``"<root>"`` for the root) of the modules
    that run compiled: wrapped by ``torch.compile`` or compiled in place."""
    wrapper = _optimized_module_type()
    if wrapper is None:
        return ()  # nothing can have been compiled without dynamo
    found: dict[str, None] = {}
    if any(
        isinstance(outer, wrapper) or outer.__dict__.get("_compiled_call_impl") is not None
        for outer in root_wrappers(model)
    ):
        found[_ROOT] = None  # torch.compile(DDP(model)), DDP(model).compile(), ...
    original = unwrap_model(model)
    pairs = list(original.named_modules())
    paths = _wrapper_paths(original, wrapper)
    for name, module in _folded_names(pairs, paths):
        if isinstance(module, wrapper) or module.__dict__.get("_compiled_call_impl") is not None:
            found[name or _ROOT] = None
    return tuple(found)


class _EagerStance:
    """Counted holders of dynamo's ``force_eager`` stance (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._stance: Any = None  # the entered set_stance object while held

    def acquire(self) -> Callable[[], None]:
        """Hold the stance (when dynamo is loaded); returns the idempotent release."""
        if "torch._dynamo" not in sys.modules:
            return _nothing  # nothing was compiled in this process: everything runs eagerly
        import torch.compiler

        with self._lock:
            if self._holders == 0:
                stance = torch.compiler.set_stance("force_eager")
                stance.__enter__()
                self._stance = stance
            self._holders += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self._holders -= 1
                if self._holders == 0:
                    stance, self._stance = self._stance, None
                    stance.__exit__(None, None, None)  # back to the caller's stance

        return release


def _nothing() -> None:
    return None


_EAGER = _EagerStance()


def hold_eager() -> Callable[[], None]:
    """Run compiled code eagerly until the returned release is called (idempotent).

    For a context whose pass spans calls (:class:`~vinlens.model_inspection.ModelCapture`
    between entering and closing); otherwise use :func:`run_eagerly`.
    """
    return _EAGER.acquire()


@contextlib.contextmanager
def run_eagerly() -> Iterator[None]:
    """Inside the block every ``torch.compile``'d function and module runs eagerly.

    Costs a lock and a flag when dynamo is loaded, nothing when it is not.
    """
    release = _EAGER.acquire()
    try:
        yield
    finally:
        release()
