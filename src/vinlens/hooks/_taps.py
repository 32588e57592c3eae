"""Forward taps and the per-model caches behind them, for :mod:`vinlens.hooks` only.

A tap replaces a hooked class's ``forward`` while a :class:`~vinlens.hooks.HookSet` needs
it (see :mod:`vinlens.hooks` for why). Here: the function that replaces it and what it
serves, the live groups it reads, the filing of targets into taps, and the walk of a
model's modules kept per model structure.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
from torch.compiler import is_compiling as _is_compiling
from torch.fx import _symbolic_trace

#: ``pre(label, args, kwargs)`` and ``post(label, args, output)`` (see vinlens.hooks).
_Pre: TypeAlias = Callable[[str, tuple[Any, ...], dict[str, Any]], None]
_Post: TypeAlias = Callable[[str, tuple[Any, ...], Any], None]


def has_forward_hooks(module: nn.Module) -> bool:
    """True when ``module`` carries instance forward (pre-)hooks of its own."""
    return bool(module._forward_pre_hooks or module._forward_hooks)


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
        pre: _Pre | None,
        post: _Post | None,
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
