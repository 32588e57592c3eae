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
  when the last set using it is removed. Modules a tap cannot serve (instance
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

import contextlib
import functools
import itertools
import operator
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
from torch.compiler import is_compiling as _is_compiling
from torch.fx import _symbolic_trace
from torch.nn.modules import module as _torch_module

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


def has_forward_hooks(module: nn.Module) -> bool:
    """True when ``module`` carries instance forward (pre-)hooks of its own."""
    return bool(module._forward_pre_hooks or module._forward_hooks)


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


def module_walk(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())`` (root named ``""``), reused while the model's module
    tree is unchanged: no module added, removed or replaced anywhere in it.

    Every engine's entry walks the whole model, and on light CNNs a Python walk over
    every module costs as much as a tenth of the forward; proving an earlier walk still
    current takes a few C-level passes over the modules' ``_modules`` tables instead.
    """
    cached = _WALKS.get(id(model))
    if cached is not None:
        modules = cached.current(model)
        if modules is not None:
            return modules
    modules = list(model.named_modules())
    default_walk = nn.Module.named_modules
    # A class with its own named_modules may answer differently without any table
    # changing: its models are walked every time.
    if all(type(module).named_modules is default_walk for _, module in modules):
        with contextlib.suppress(TypeError):  # a module refusing weak references
            _WALKS[id(model)] = _Walk(model, modules)
    return modules


_module_tables = operator.attrgetter("_modules")


def _table_facts(tables: list[dict[str, Any]]) -> tuple[list[int], list[int], list[str], list[int]]:
    """What determines a walk: each table's identity and length, and every table's keys and
    children's ids in order (flat lists built in C: no Python frame per module)."""
    return (
        list(map(id, tables)),
        list(map(len, tables)),
        list(itertools.chain.from_iterable(tables)),
        list(map(id, itertools.chain.from_iterable(map(dict.values, tables)))),
    )


class _Walk:
    """One model's ``named_modules()`` pairs and what proves them current.

    The walk is determined by each module's ``_modules`` table (same table object,
    same names, same children in the same order), so comparing those tables with the
    ones seen when the walk was made is enough to reuse it. Only weak references and
    ids are kept, so a cached walk never keeps a model or any of its modules alive; a
    child replaced by a new object at a freed one's address is caught because the
    freed one's weak reference is dead.
    """

    __slots__ = ("__weakref__", "facts", "model", "names", "refs")

    def __init__(self, model: nn.Module, modules: list[tuple[str, nn.Module]]) -> None:
        key = id(model)
        this = weakref.ref(self)

        def forget(_: object) -> None:
            # Runs when the model is freed (possibly inside any other code): no lock.
            if _WALKS.get(key) is this():
                _WALKS.pop(key, None)

        self.model = weakref.ref(model, forget)
        self.refs = [weakref.ref(module) for _, module in modules]
        self.facts = _table_facts(list(map(_module_tables, (module for _, module in modules))))
        # The pairs themselves are rebuilt from the weak references on every reuse.
        self.names = [name for name, _ in modules]

    def current(self, model: nn.Module) -> list[tuple[str, nn.Module]] | None:
        """The walk if ``model``'s module tree is unchanged since it was made, else None."""
        if self.model() is not model:
            return None
        modules = [ref() for ref in self.refs]
        if None in modules:  # a module freed: the tree changed
            return None
        if _table_facts(list(map(_module_tables, modules))) != self.facts:
            return None
        return list(zip(self.names, modules, strict=True))  # type: ignore[arg-type]


# Walks by model identity; an entry leaves when its model is freed.
_WALKS: dict[int, _Walk] = {}


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
        return self._keep(module.register_full_backward_hook(hook, prepend=prepend))

    def full_backward_pre(
        self, module: nn.Module, hook: BackwardPreHook, *, prepend: bool = False
    ) -> Any:
        """``module.register_full_backward_pre_hook``; ``hook(module, grad_output)``."""
        return self._keep(module.register_full_backward_pre_hook(hook, prepend=prepend))

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

            self._keep(_torch_module.register_module_full_backward_pre_hook(global_pre))
        if post is not None:
            call_post = post

            def global_post(
                module: nn.Module, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]
            ) -> None:
                label = find(id(module))
                if label is not None:
                    call_post(label, grad_input, grad_output)

            self._keep(_torch_module.register_module_full_backward_hook(global_post))


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


#: Targets filed for taps: each module's id to its label and the class whose forward its
#: calls run, and those classes with their ``_tap_owner`` (shared, never changed).
_Filing: TypeAlias = tuple[dict[int, tuple[str, type]], dict[type, type]]
_FilingKey: TypeAlias = tuple[tuple[str, ...], tuple[int, ...], tuple[type, ...]]

_second = operator.itemgetter(1)
_first = operator.itemgetter(0)
_instance_dict = operator.attrgetter("__dict__")
_pre_hook_table = operator.attrgetter("_forward_pre_hooks")
_hook_table = operator.attrgetter("_forward_hooks")
_FILINGS: dict[_FilingKey, _Filing] = {}
_FILINGS_KEPT = 32


def _file(
    targets: Sequence[tuple[str, nn.Module]],
    tappable: bool,
    instance: dict[int, tuple[str, nn.Module]],
) -> _Filing:
    """File each target for a tap, or into ``instance`` when a tap cannot serve it."""
    filed: dict[int, tuple[str, type]] = {}
    owners: dict[type, type | None] = {}  # per class: whose forward a call runs
    classes: dict[type, type] = {}
    for label, module in targets:
        key = id(module)
        if key in filed or key in instance:
            continue
        cls = type(module)
        owner = owners.get(cls, _UNKNOWN) if tappable else None
        if owner is _UNKNOWN:
            owner = owners[cls] = _tap_owner(cls)
        # An instance forward of its own, or instance hooks: a tap would not see theirs.
        if owner is None or "forward" in module.__dict__ or has_forward_hooks(module):
            instance[key] = (label, module)
            continue
        filed[key] = (label, owner)
        classes[cls] = owner
    return filed, classes


def _filing_key(targets: Sequence[tuple[str, nn.Module]], modules: list[nn.Module]) -> _FilingKey:
    """What a filing depends on besides instance state: labels, module ids and classes.

    Two target lists alike in all three file alike (a reused id with the same class and
    label files the same way), so no module needs to be kept alive by the cache.
    """
    return tuple(map(_first, targets)), tuple(map(id, modules)), tuple(map(type, modules))


def _filing(key: _FilingKey | None, modules: list[nn.Module]) -> _Filing | None:
    """The filing made earlier for ``key``, while it still holds: no target has gained an
    instance ``forward`` or instance forward hooks, and no class a different forward.

    Filing walks every target in Python (0.3-0.4 ms over 256 modules once a forward has
    cooled the caches); these checks are C-level passes over the modules."""
    if key is None:
        return None
    filing = _FILINGS.get(key)
    if filing is None:
        return None
    if (
        any(map(operator.contains, map(_instance_dict, modules), itertools.repeat("forward")))
        or any(map(_pre_hook_table, modules))
        or any(map(_hook_table, modules))
    ):
        return None
    for cls, owner in filing[1].items():
        if _tap_owner(cls) is not owner:
            return None
    return filing


def _remember_filing(key: _FilingKey, filing: _Filing) -> None:
    _FILINGS[key] = filing
    while len(_FILINGS) > _FILINGS_KEPT:  # the oldest first
        _FILINGS.pop(next(iter(_FILINGS)), None)


class _TapGroup:
    """One :meth:`HookSet.hook_modules` call served by taps: its modules and callbacks.

    ``filed`` maps each module's id to its label and the class whose forward its calls
    run; ``modules`` holds the modules themselves, so no id can be reused by another
    module while the group is live. ``thread``: the only thread whose calls it observes
    (None: every thread).
    """

    __slots__ = ("always_call", "classes", "filed", "modules", "owners", "post", "pre", "thread")

    def __init__(
        self,
        filing: _Filing,
        modules: list[nn.Module],
        pre: LabelledPreHook | None,
        post: LabelledPostHook | None,
        always_call: bool,
        thread: int | None = None,
    ) -> None:
        self.filed, self.classes = filing
        self.modules = modules
        self.pre = pre
        self.post = post
        self.always_call = always_call
        self.thread = thread
        self.owners: list[type] = []  # classes this group holds a tap on


class _Live:
    """The live groups, one tuple replaced (never changed in place) under the lock: a tap
    reads it unlocked, through this object (a tap function sees no globals of ours)."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: tuple[_TapGroup, ...] = ()


_TAPS_LOCK = threading.Lock()
_LIVE = _Live()
_UNKNOWN: Any = object()


def _unobserved(args: tuple[Any, ...]) -> bool:
    """True for a call no engine may observe: traced or compiled (``torch.fx``'s symbolic
    tracing, dynamo and so ``torch.export``'s strict mode) or on fake or proxy arguments
    (``torch.export``, ``make_fx``, a ``FakeTensorMode``). Their values are not the model's
    values, and reading them (a ``bool`` of a symbolic size, a reduction of a fake tensor)
    would break the trace or record nothing true. Meta tensors are observed: capture
    records their metadata. Every observed call pays for this check (about 0.2 us), so
    the arguments are judged by their first tensor, and dispatch modes are not read."""
    for arg in args:
        if type(arg) is torch.Tensor:
            break
        if isinstance(arg, torch.Tensor):
            if _is_fake(arg):
                return True
            break
        if isinstance(arg, torch.fx.Proxy):
            return True
    return _is_compiling() or bool(_symbolic_trace._is_fx_tracing_flag)


def _is_fake(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, _FakeTensor)


def _serve(
    owner: type,
    original: Callable[..., Any],
    module: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """A tapped call of a module some live group filed: observed by the groups that
    filed it under ``owner`` (a subclass's ``super().forward`` runs its parent's tap
    with an instance filed under the subclass: not served twice) and watch this thread."""
    key = id(module)
    hits: tuple[tuple[_TapGroup, str], ...] = ()
    ident = 0
    for group in _LIVE.groups:
        found = group.filed.get(key)
        if found is None or found[1] is not owner:
            continue
        if group.thread is not None:
            ident = ident or threading.get_ident()
            if group.thread != ident:
                continue
        hits = (*hits, (group, found[0]))
    if not hits or _unobserved(args):
        return original(module, *args, **kwargs)
    for group, label in hits:
        if group.pre is not None:
            group.pre(label, args, kwargs)
    try:
        output = original(module, *args, **kwargs)
    except Exception:
        for group, label in hits:
            if group.always_call and group.post is not None:
                group.post(label, args, None)
        raise
    for group, label in hits:
        if group.post is not None:
            group.post(label, args, output)
    return output


def _tap_function(owner: type, original: Any) -> Any:
    """The function that replaces ``owner.forward`` while tapped.

    It reads nothing from this module's globals (only its own closure, names prefixed
    ``_vinlens_``) and is rebuilt with the original's globals: ``torch.jit.script``
    compiles a method from its source, which ``inspect`` finds through ``__wrapped__``
    (the original's), resolving names through the function's own globals and closure,
    so scripting during a tap compiles the original ``forward`` exactly as it would
    without the tap, and caches nothing of ours for the class.
    """
    _vinlens_id = id
    _vinlens_live = _LIVE
    _vinlens_serve = _serve
    _vinlens_owner = owner
    _vinlens_original = original

    def forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        key = _vinlens_id(module)
        for group in _vinlens_live.groups:
            if key in group.filed:
                return _vinlens_serve(_vinlens_owner, _vinlens_original, module, args, kwargs)
        return _vinlens_original(module, *args, **kwargs)

    rebuilt = types.FunctionType(
        forward.__code__, original.__globals__, original.__name__, None, forward.__closure__
    )
    functools.update_wrapper(rebuilt, original)
    return rebuilt


class _ClassTap:
    """A class's ``forward``, replaced by one that serves the modules of live groups.

    Calls of modules no live group filed (other models, data-parallel replicas, copies)
    run the original after one dictionary miss per live group. The replacement keeps
    the original's name, docstring and signature (``functools.update_wrapper``:
    ``inspect.signature`` follows ``__wrapped__``).
    """

    __slots__ = ("function", "groups", "original", "owner")

    def __init__(self, owner: type) -> None:
        original = owner.__dict__["forward"]
        self.owner = owner
        self.original = original
        # Building the function (and its wrapper attributes) costs about 10 us a class on
        # every engine's entry; a class tapped again with the same forward reuses it.
        function = _TAP_FUNCTIONS.get(owner)
        if function is None or function.__wrapped__ is not original:
            function = _TAP_FUNCTIONS[owner] = _tap_function(owner, original)
            while len(_TAP_FUNCTIONS) > _TAP_FUNCTIONS_KEPT:  # the oldest first
                _TAP_FUNCTIONS.pop(next(iter(_TAP_FUNCTIONS)), None)
        self.function = function
        self.groups = 0  # live groups that need this tap


# Tap functions made, by class (bounded: a process that defines classes on the fly keeps
# the last ones only).
_TAP_FUNCTIONS: dict[type, Any] = {}
_TAP_FUNCTIONS_KEPT = 256

# Class taps by the class whose ``forward`` they replace; present while a group needs it.
_TAPS: dict[type, _ClassTap] = {}


def _tap_owner(cls: type) -> type | None:
    """The class whose ``forward`` an instance of ``cls`` runs, when a tap can serve it."""
    for base in cls.__mro__:
        function = base.__dict__.get("forward")
        if function is None:
            continue
        if base is nn.Module:
            return None  # no forward at all (ModuleList, ModuleDict): never called
        # A live tap is a plain function too. TorchScript's forward and any other
        # descriptor are left to instance hooks.
        return base if isinstance(function, types.FunctionType) else None
    return None


def _untap(group: _TapGroup) -> None:
    """Retire ``group``; restore each class whose tap no live group needs any more."""
    with _TAPS_LOCK:
        _LIVE.groups = tuple(live for live in _LIVE.groups if live is not group)
        owners, group.owners = group.owners, []
        for owner in owners:
            class_tap = _TAPS[owner]
            class_tap.groups -= 1
            if class_tap.groups:
                continue
            del _TAPS[owner]
            # A forward set on the class after ours (another patch wrapping ours) stays:
            # ours, with no group left, passes every call straight through.
            if owner.__dict__.get("forward") is class_tap.function:
                type.__setattr__(owner, "forward", class_tap.original)


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
