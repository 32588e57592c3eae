"""The one place vinlens registers hooks on the caller's model (engine side, no UI).

Every engine that observes a forward or backward (capture, health, attribution, the
training monitor) registers through a :class:`HookSet`: a set of removable handles that
is a context manager and removes everything it registered on every exit, exceptions
and cancellation (``OperationCancelled``, ``KeyboardInterrupt``) included. Removal is
idempotent and safe in the middle of a forward: PyTorch copies a hook table before it
iterates it.

Kinds of hooks:

* instance forward pre-hooks (optionally with kwargs) and forward hooks (optionally
  ``always_call``, so they also run when the forward raises);
* forward taps (:meth:`HookSet.hook_modules`, the whole-model fast path): the
  ``forward`` of each target's class is replaced, for the life of the set, by one
  function that looks the calling instance up by identity and runs the labelled
  pre/post callbacks around the original. Instance hooks would cost two registrations
  per module, and any global hook puts *every* module call in the process on
  PyTorch's slow hooked path (about 5-10 us a call in ``Module._call_impl``, more
  than a light CNN's BatchNorm or activation itself); a tap leaves ``_call_impl`` on
  its fast path and adds one Python frame. Taps are shared by every set and
  reference-counted per class under a lock; the original ``forward`` is put back
  when the last set using it is removed (the machinery is in ``vinlens.hooks._taps``,
  imported only from here). Modules a tap cannot serve (instance
  hooks or an instance ``forward`` of their own, TorchScript, a ``forward`` that is
  not a Python function) get instance hooks;
* full backward hooks and full backward pre-hooks on instances, and globally filtered
  by module identity;
* tensor hooks (``Tensor.register_hook``) and parameter post-accumulate-grad hooks.

:class:`CallPairing` matches each module call's pre-hook with its post-hook per thread
(two threads running the same module interleave their calls) and numbers calls per
path, in the order they begin.

Designed after ``torch/utils/hooks.py`` (``RemovableHandle``) and Captum's
``_utils/gradient.py``, the one bottom module every Captum method imports.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, cast

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from vinlens.hooks._taps import (
    _LIVE,
    _TAPS,
    _TAPS_LOCK,
    _ClassTap,
    _file,
    _filing,
    _filing_key,
    _remember_filing,
    _second,
    _TapGroup,
    _unobserved,
    _untap,
    has_forward_hooks,
    module_walk,
)

__all__ = [
    "BackwardHook",
    "BackwardPreHook",
    "CallPairing",
    "HookSet",
    "LabelledBackwardHook",
    "LabelledBackwardPreHook",
    "LabelledPostHook",
    "LabelledPreHook",
    "has_forward_hooks",
    "leftover_hooks",
    "module_walk",
]

#: ``pre(label, args, kwargs)``: a module call is about to run (kwargs ``{}`` when none).
LabelledPreHook: TypeAlias = Callable[[str, tuple[Any, ...], dict[str, Any]], None]
#: ``post(label, args, output)``: a module call returned ``output``.
LabelledPostHook: TypeAlias = Callable[[str, tuple[Any, ...], Any], None]
#: ``hook(label, grad_input, grad_output)``: gradients w.r.t. a module's inputs were computed.
LabelledBackwardHook: TypeAlias = Callable[[str, tuple[Any, ...], tuple[Any, ...]], None]
#: ``hook(label, grad_output)``: gradients w.r.t. a module's outputs arrived.
LabelledBackwardPreHook: TypeAlias = Callable[[str, tuple[Any, ...]], None]
#: PyTorch's full backward hook signature.
BackwardHook: TypeAlias = Callable[[nn.Module, tuple[Any, ...], tuple[Any, ...]], Any]
#: PyTorch's full backward pre-hook signature.
BackwardPreHook: TypeAlias = Callable[[nn.Module, tuple[Any, ...]], Any]

_Payload = TypeVar("_Payload")


def leftover_hooks(modules: Iterable[nn.Module] = ()) -> list[str]:
    """Descriptions of hooks still registered: global ones and on ``modules``' instances.

    Forward taps (see the module docstring) still filed are reported too. An empty
    list means nothing is left; tests of every engine call this after success,
    exceptions and cancellation.
    """
    found: list[str] = []
    for name in (
        "_global_forward_pre_hooks",
        "_global_forward_hooks",
        "_global_backward_pre_hooks",
        "_global_backward_hooks",
        "_global_forward_hooks_with_kwargs",
        "_global_forward_hooks_always_called",
    ):
        table = getattr(_torch_module, name, None)
        if table:
            found.append(f"torch.nn.modules.module.{name}: {len(table)}")
    with _TAPS_LOCK:
        for owner, class_tap in _TAPS.items():
            found.append(
                f"vinlens forward tap on {owner.__qualname__}: {class_tap.groups} live group(s)"
            )
    for module in modules:
        for name in (
            "_forward_pre_hooks",
            "_forward_pre_hooks_with_kwargs",
            "_forward_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_hooks_always_called",
            "_backward_pre_hooks",
            "_backward_hooks",
        ):
            table = getattr(module, name, None)
            if table:
                found.append(f"{type(module).__qualname__}.{name}: {len(table)}")
    return found


class HookSet:
    """Removable hook handles, removed together on :meth:`remove` or on leaving ``with``.

    Use as ``with HookSet() as hooks: hooks.forward(module, fn); run()``. Every
    registration method returns PyTorch's own handle too, so one hook can be removed
    early; the set still removes it (again, harmlessly) at the end. A set can be
    reused after :meth:`remove`.
    """

    __slots__ = ("_removers",)

    def __init__(self) -> None:
        self._removers: list[Callable[[], None]] = []

    def __enter__(self) -> HookSet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        self.remove()

    def __len__(self) -> int:
        return len(self._removers)

    def __repr__(self) -> str:
        return f"HookSet({len(self._removers)} registered)"

    def remove(self) -> None:
        """Remove every hook and flag of this set, newest first; safe to call again.

        Every remover runs even when one fails; the first failure is raised after.
        """
        removers, self._removers = self._removers, []
        failure: BaseException | None = None
        for remover in reversed(removers):
            try:
                remover()
            except BaseException as error:  # keep removing: a hook left behind is worse
                if failure is None:
                    failure = error
        if failure is not None:
            raise failure

    def on_remove(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the set is removed (after hooks registered later)."""
        self._removers.append(callback)

    def _keep(self, handle: Any) -> Any:
        self._removers.append(handle.remove)
        return handle

    # -- instance hooks ------------------------------------------------------------------

    def forward_pre(
        self,
        module: nn.Module,
        hook: Callable[..., Any],
        *,
        with_kwargs: bool = False,
        prepend: bool = False,
    ) -> Any:
        """``module.register_forward_pre_hook``; ``hook(module, args[, kwargs])``."""
        return self._keep(
            module.register_forward_pre_hook(hook, with_kwargs=with_kwargs, prepend=prepend)
        )

    def forward(
        self,
        module: nn.Module,
        hook: Callable[..., Any],
        *,
        with_kwargs: bool = False,
        always_call: bool = False,
        prepend: bool = False,
    ) -> Any:
        """``module.register_forward_hook``; ``hook(module, args[, kwargs], output)``."""
        return self._keep(
            module.register_forward_hook(
                hook, with_kwargs=with_kwargs, always_call=always_call, prepend=prepend
            )
        )

    def full_backward(self, module: nn.Module, hook: BackwardHook, *, prepend: bool = False) -> Any:
        """``module.register_full_backward_hook``; ``hook(module, grad_input, grad_output)``."""
        return self._keep(module.register_full_backward_hook(cast(Any, hook), prepend=prepend))

    def full_backward_pre(
        self, module: nn.Module, hook: BackwardPreHook, *, prepend: bool = False
    ) -> Any:
        """``module.register_full_backward_pre_hook``; ``hook(module, grad_output)``."""
        return self._keep(module.register_full_backward_pre_hook(cast(Any, hook), prepend=prepend))

    def tensor(self, tensor: torch.Tensor, hook: Callable[[torch.Tensor], Any]) -> Any:
        """``tensor.register_hook``: ``hook(grad)`` when the tensor's gradient is computed.

        Removing the handle after the graph ran is harmless; a tensor freed before
        removal takes its hook with it.
        """
        return self._keep(tensor.register_hook(hook))  # type: ignore[no-untyped-call]

    def post_accumulate_grad(
        self, parameter: torch.Tensor, hook: Callable[[torch.Tensor], None]
    ) -> Any:
        """``parameter.register_post_accumulate_grad_hook``: ``hook(parameter)`` after
        its ``.grad`` was accumulated."""
        return self._keep(parameter.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]

    # -- labelled forward hooks over many modules --------------------------------------

    def hook_modules(
        self,
        targets: Sequence[tuple[str, nn.Module]],
        pre: LabelledPreHook | None = None,
        post: LabelledPostHook | None = None,
        *,
        always_call: bool = False,
        use_global: bool = True,
        own_thread: bool = False,
    ) -> None:
        """``pre``/``post`` around every call of every target module, labelled by path.

        With ``use_global`` (the whole-model fast path), modules without instance
        forward hooks of their own are served by forward taps (see the module
        docstring): ``pre`` sees the arguments ``forward`` receives, after every
        pre-hook; ``post`` sees what ``forward`` returned, before any forward hook.
        Modules that already carry instance hooks get instance hooks appended after
        theirs, so these still see what those hooks change; so do modules a tap cannot
        serve, and all targets without ``use_global``.

        The pre-hook receives kwargs (``{}`` when none). A module reached under two
        labels keeps the first. With ``always_call``, ``post`` also runs (with output
        None) when the forward raises an ``Exception``, as PyTorch's always-called
        hooks do. With ``own_thread``, only calls made on the thread that calls this
        method are observed: an engine driving a forward must not merge in another
        thread serving the same model meanwhile.

        Calls on fake or proxy tensors (``torch.fx`` tracing, ``torch.export``,
        dynamo) run the original ``forward`` unobserved, whichever way they are hooked.
        """
        tappable = use_global and (pre is not None or post is not None)
        thread = threading.get_ident() if own_thread else None
        modules = list(map(_second, targets))
        instance: dict[int, tuple[str, nn.Module]] = {}
        key = _filing_key(targets, modules) if tappable else None
        filing = _filing(key, modules)
        if filing is None:
            filing = _file(targets, tappable, instance)
            if key is not None and not instance:
                _remember_filing(key, filing)
        if filing[0]:
            self._tap(_TapGroup(filing, modules, pre, post, always_call, thread))
        for label, module in instance.values():
            if pre is not None:
                self.forward_pre(module, _instance_pre(label, pre, thread), with_kwargs=True)
            if post is not None:
                self.forward(module, _instance_post(label, post, thread), always_call=always_call)

    def _tap(self, group: _TapGroup) -> None:
        """Make ``group`` live: tap each class it needs, then publish it to the taps."""
        needed = set(group.classes.values())
        # Removed even when tapping fails part way (a class refusing setattr).
        self.on_remove(lambda: _untap(group))
        with _TAPS_LOCK:
            for owner in needed:
                class_tap = _TAPS.get(owner)
                if class_tap is None:
                    class_tap = _ClassTap(owner)
                    type.__setattr__(owner, "forward", class_tap.function)
                    _TAPS[owner] = class_tap
                class_tap.groups += 1
                group.owners.append(owner)
            _LIVE.groups = (*_LIVE.groups, group)

    # -- labelled backward hooks over many modules -------------------------------------

    def hook_modules_backward(
        self,
        targets: Sequence[tuple[str, nn.Module]],
        pre: LabelledBackwardPreHook | None = None,
        post: LabelledBackwardHook | None = None,
        *,
        use_global: bool = True,
    ) -> None:
        """Full backward pre-hooks (``pre(label, grad_output)``) and full backward hooks
        (``post(label, grad_input, grad_output)``) on every target, labelled by path.

        With ``use_global``, one global pair filtered by module identity serves every
        target; else instance hooks. Hooks return None: gradients are never changed.
        """
        labels: dict[int, str] = {}
        for label, module in targets:
            labels.setdefault(id(module), label)
        find = labels.get
        if not use_global:
            seen: set[int] = set()
            for label, module in targets:
                if id(module) in seen:
                    continue
                seen.add(id(module))
                if pre is not None:
                    self.full_backward_pre(module, _instance_backward_pre(label, pre))
                if post is not None:
                    self.full_backward(module, _instance_backward(label, post))
            return
        if pre is not None:
            call_pre = pre

            def global_pre(module: nn.Module, grad_output: tuple[Any, ...]) -> None:
                label = find(id(module))
                if label is not None:
                    call_pre(label, grad_output)

            self._keep(_torch_module.register_module_full_backward_pre_hook(cast(Any, global_pre)))
        if post is not None:
            call_post = post

            def global_post(
                module: nn.Module, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]
            ) -> None:
                label = find(id(module))
                if label is not None:
                    call_post(label, grad_input, grad_output)

            self._keep(_torch_module.register_module_full_backward_hook(cast(Any, global_post)))


def _instance_pre(
    label: str, pre: LabelledPreHook, thread: int | None
) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
    def pre_hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (thread is None or threading.get_ident() == thread) and not _unobserved(args):
            pre(label, args, kwargs)

    return pre_hook


def _instance_post(
    label: str, post: LabelledPostHook, thread: int | None
) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
    def post_hook(_module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if (thread is None or threading.get_ident() == thread) and not _unobserved(args):
            post(label, args, output)

    return post_hook


def _instance_backward_pre(label: str, pre: LabelledBackwardPreHook) -> BackwardPreHook:
    def hook(_module: nn.Module, grad_output: tuple[Any, ...]) -> None:
        pre(label, grad_output)

    return hook


def _instance_backward(label: str, post: LabelledBackwardHook) -> BackwardHook:
    def hook(_module: nn.Module, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]) -> None:
        post(label, grad_input, grad_output)

    return hook


class CallPairing(Generic[_Payload]):
    """Pairs each module call's pre-hook with its post-hook, per thread, and numbers calls.

    :meth:`begin` gives a call the next index of its path (per path, in the order
    calls begin, over every thread) and keeps ``payload`` until :meth:`end`. Calls of
    one path on one thread finish in LIFO order, so the match is normally the top
    entry of that thread's stack; a nested call that ended in a ``BaseException``
    PyTorch's always-call hooks do not see (``KeyboardInterrupt``) and was caught
    inside forward leaves a stale entry above ours, so the args tuple's identity is
    matched and stale entries are dropped. Thread-safe.
    """

    __slots__ = ("_counts", "_lock", "_pending")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        # Per (thread, path): calls in flight as (index, id of the args tuple, payload).
        self._pending: dict[tuple[int, str], list[tuple[int, int, _Payload]]] = {}

    def next_index(self, label: str) -> int:
        """Number a call of ``label`` that needs no pairing (for example a post-hook only)."""
        with self._lock:
            index = self._counts.get(label, 0)
            self._counts[label] = index + 1
            return index

    def begin(self, label: str, args: tuple[Any, ...], payload: _Payload) -> int:
        """Record a call of ``label`` starting on this thread; returns its call index."""
        key = (threading.get_ident(), label)
        with self._lock:
            index = self._counts.get(label, 0)
            self._counts[label] = index + 1
            self._pending.setdefault(key, []).append((index, id(args), payload))
        return index

    def end(self, label: str, args: tuple[Any, ...]) -> tuple[int, _Payload] | None:
        """(index, payload) of the call of ``label`` finishing on this thread, or None when
        it began before pairing started."""
        key = (threading.get_ident(), label)
        args_id = id(args)
        with self._lock:
            stack = self._pending.get(key)
            if not stack:
                return None
            for position in range(len(stack) - 1, -1, -1):
                index, pending_args_id, payload = stack[position]
                if pending_args_id == args_id:
                    del stack[position:]
                    return index, payload
            # A pre-hook added after ours replaced args: fall back to LIFO order.
            index, _, payload = stack.pop()
            return index, payload

    def count(self, label: str) -> int:
        """Calls of ``label`` begun so far."""
        with self._lock:
            return self._counts.get(label, 0)

    def in_flight(self) -> int:
        """Calls begun and not yet ended, over every thread."""
        with self._lock:
            return sum(len(stack) for stack in self._pending.values())

    def clear(self) -> None:
        """Drop calls in flight (their payloads), keeping the call counts."""
        with self._lock:
            self._pending.clear()
