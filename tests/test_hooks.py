"""vinlens.hooks: every kind of hook is removed after success, exception and cancel;
calls are paired per thread."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

from vinlens.hooks import CallPairing, HookSet, leftover_hooks


class Cancelled(BaseException):
    """Stands for a cancel raised from inside the run (as OperationCancelled or Ctrl-C)."""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x) * scale))


def _run(model: Net, outcome: str) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    out = model(x, scale=2.0)
    out.sum().backward()
    if outcome == "exception":
        raise ValueError("planted")
    if outcome == "cancel":
        raise Cancelled


OUTCOMES = ["success", "exception", "cancel"]


def _finish(outcome: str, body: Callable[[], None]) -> None:
    if outcome == "success":
        body()
    elif outcome == "exception":
        with pytest.raises(ValueError, match="planted"):
            body()
    else:
        with pytest.raises(Cancelled):
            body()


LINEAR_FORWARD = nn.Linear.__dict__["forward"]


def _no_hooks(model: nn.Module) -> None:
    assert leftover_hooks(model.modules()) == []
    # Every class forward a tap replaced is the original object again.
    assert nn.Linear.__dict__["forward"] is LINEAR_FORWARD
    for module in model.modules():
        assert not hasattr(type(module).forward, "__wrapped__"), type(module)
    for parameter in model.parameters():
        assert not getattr(parameter, "_post_accumulate_grad_hooks", None)


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_instance_hook_kind_is_removed(outcome: str) -> None:
    model = Net()
    seen: list[str] = []

    def body() -> None:
        with HookSet() as hooks:
            hooks.forward_pre(model.a, lambda m, a: seen.append("pre"))
            hooks.forward_pre(model.a, lambda m, a, k: seen.append("pre-kw"), with_kwargs=True)
            hooks.forward(model.a, lambda m, a, o: seen.append("post"))
            hooks.forward(model.b, lambda m, a, o: seen.append("post-always"), always_call=True)
            hooks.full_backward(model.a, lambda m, gi, go: seen.append("backward"))
            hooks.full_backward_pre(model.b, lambda m, go: seen.append("backward-pre"))
            hooks.post_accumulate_grad(model.a.weight, lambda p: seen.append("accumulated"))
            x = torch.randn(2, 4, requires_grad=True)
            hooks.tensor(x, lambda g: seen.append("tensor"))
            assert len(hooks) == 8
            model(x).sum().backward()
            _run(model, outcome)

    _finish(outcome, body)
    for kind in (
        "pre",
        "pre-kw",
        "post",
        "post-always",
        "backward",
        "backward-pre",
        "accumulated",
        "tensor",
    ):
        assert kind in seen, kind
    _no_hooks(model)
    count = len(seen)
    model(torch.randn(1, 4)).sum().backward()
    assert len(seen) == count  # nothing fires any more


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("use_global", [True, False])
def test_labelled_module_hooks_are_removed_with_their_kwargs_flags(
    outcome: str, use_global: bool
) -> None:
    model = Net()
    targets = [("<root>", model), ("a", model.a), ("b", model.b)]
    calls: list[tuple[str, str, Any]] = []

    def pre(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        calls.append(("pre", label, dict(kwargs)))

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        calls.append(("post", label, tuple(output.shape)))

    def body() -> None:
        with HookSet() as hooks:
            hooks.hook_modules(targets, pre, post, always_call=True, use_global=use_global)
            hooks.hook_modules_backward(
                targets,
                pre=lambda label, go: calls.append(("bpre", label, None)),
                post=lambda label, gi, go: calls.append(("bpost", label, None)),
                use_global=use_global,
            )
            if use_global:
                # Forward taps, no global hook: every other module call in the process
                # stays on PyTorch's fast path.
                assert not torch_module._global_forward_pre_hooks
                assert not torch_module._global_forward_hooks
                assert nn.Linear.__dict__["forward"] is not LINEAR_FORWARD
                assert not model.a._forward_pre_hooks and not model.a._forward_hooks
            _run(model, outcome)

    _finish(outcome, body)
    assert ("pre", "<root>", {"scale": 2.0}) in calls  # kwargs reach the tap's pre-hook too
    assert ("post", "b", (3, 2)) in calls
    # Backward reaches the output first; a module's input gradients come after its children's.
    assert [c[1] for c in calls if c[0] == "bpre"] == ["<root>", "b", "a"]
    assert [c[1] for c in calls if c[0] == "bpost"] == ["b", "a", "<root>"]
    _no_hooks(model)


def test_instance_hooks_serve_modules_with_hooks_of_their_own() -> None:
    model = Net()
    # The user's own hook doubles a's output; ours must see the doubled value.
    user = model.a.register_forward_hook(lambda m, a, o: o * 2)
    seen: dict[str, torch.Tensor] = {}
    try:
        with HookSet() as hooks:
            hooks.hook_modules([("a", model.a)], post=lambda label, a, o: seen.setdefault(label, o))
            assert not torch_module._global_forward_hooks
            x = torch.randn(1, 4)
            model.a(x)
        torch.testing.assert_close(
            seen["a"], nn.functional.linear(x, model.a.weight, model.a.bias) * 2
        )
        assert list(model.a._forward_hooks) == [user.id]
    finally:
        user.remove()


def test_always_call_post_hook_runs_when_the_forward_raises() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Identity(), Boom())
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), HookSet() as hooks:
        hooks.hook_modules(
            [("0", model[0]), ("1", model[1])],
            post=lambda label, a, o: seen.append(label),
            always_call=True,
        )
        model(torch.zeros(1))
    assert seen == ["0", "1"]
    _no_hooks(model)


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
        """Base's own forward."""
        return x * self.weight + shift


class Derived(Base):
    def forward(self, x: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
        return super().forward(x, shift) * 2


class Inherits(Base):
    """No forward of its own: Base's runs."""


BASE_FORWARD = Base.__dict__["forward"]
DERIVED_FORWARD = Derived.__dict__["forward"]


def test_taps_serve_only_their_instances_once_per_call() -> None:
    base, derived, inherits, stranger = Base(), Derived(), Inherits(), Base()
    model = nn.Sequential(base, derived, inherits)
    calls: list[tuple[str, str]] = []
    with HookSet() as hooks:
        hooks.hook_modules(
            [("base", base), ("derived", derived), ("inherits", inherits)],
            lambda label, a, k: calls.append(("pre", label)),
            lambda label, a, o: calls.append(("post", label)),
        )
        # One tap per class defining the forward that runs; none on Inherits.
        assert "forward" not in Inherits.__dict__
        assert Derived.__dict__["forward"].__wrapped__ is DERIVED_FORWARD
        assert Base.__dict__["forward"].__wrapped__ is BASE_FORWARD
        # The signature and docstring seen by code that inspects forward are unchanged.
        assert inspect.signature(base.forward) == inspect.signature(BASE_FORWARD.__get__(base))
        assert base.forward.__doc__ == "Base's own forward."
        x = torch.ones(2)
        out = model(x)
        # Derived's super().forward runs Base's tap for a Derived instance: not recorded
        # again. A Base that is not a target, and a copy made now, pass straight through.
        assert calls == [
            ("pre", "base"),
            ("post", "base"),
            ("pre", "derived"),
            ("post", "derived"),
            ("pre", "inherits"),
            ("post", "inherits"),
        ]
        copy = deepcopy(base)
        with torch.no_grad():
            copy.weight.fill_(3.0)
        torch.testing.assert_close(copy(x), torch.full((2,), 3.0))
        torch.testing.assert_close(stranger(x), x)
        assert len(calls) == 6
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert Base.__dict__["forward"] is BASE_FORWARD
    assert Derived.__dict__["forward"] is DERIVED_FORWARD
    assert "forward" not in Inherits.__dict__
    _no_hooks(model)


def test_taps_are_shared_by_sets_and_restored_when_the_last_one_goes() -> None:
    model = Net()
    outer_seen: list[str] = []
    inner_seen: list[str] = []
    outer = HookSet()
    outer.hook_modules([("a", model.a)], post=lambda label, a, o: outer_seen.append(label))
    with HookSet() as inner:
        inner.hook_modules(
            [("a", model.a), ("b", model.b)], post=lambda label, a, o: inner_seen.append(label)
        )
        model(torch.randn(1, 4))
    assert (outer_seen, inner_seen) == (["a"], ["a", "b"])
    assert nn.Linear.__dict__["forward"] is not LINEAR_FORWARD  # the outer set still needs it
    model(torch.randn(1, 4))
    assert (outer_seen, inner_seen) == (["a", "a"], ["a", "b"])
    outer.remove()
    _no_hooks(model)


def test_a_forward_patched_over_a_tap_is_left_and_the_tap_passes_through() -> None:
    model = Net()
    seen: list[str] = []
    original = nn.Linear.__dict__["forward"]
    try:
        with HookSet() as hooks:
            hooks.hook_modules([("a", model.a)], post=lambda label, a, o: seen.append(label))
            tapped = nn.Linear.__dict__["forward"]

            def patched(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
                return tapped(self, x) + 1

            nn.Linear.forward = patched  # another library wraps forward while the set lives
        assert nn.Linear.__dict__["forward"] is patched
        x = torch.randn(1, 4)
        torch.testing.assert_close(
            model.a(x), nn.functional.linear(x, model.a.weight, model.a.bias) + 1
        )
        assert seen == []  # the set is gone: nothing recorded
        assert leftover_hooks(model.modules()) == []
    finally:
        nn.Linear.forward = original
    _no_hooks(model)


def test_an_instance_forward_of_its_own_gets_instance_hooks() -> None:
    model = Net()
    linear_forward = model.a.forward
    model.a.forward = lambda x: linear_forward(x) * 0  # type: ignore[method-assign]
    seen: dict[str, torch.Tensor] = {}
    with HookSet() as hooks:
        hooks.hook_modules([("a", model.a)], post=lambda label, a, o: seen.setdefault(label, o))
        assert model.a._forward_hooks  # a tap would never see this instance's calls
        model.a(torch.randn(1, 4))
    assert torch.count_nonzero(seen["a"]) == 0
    _no_hooks(model)


def test_remove_is_idempotent_safe_mid_forward_and_keeps_removing_after_a_failure() -> None:
    model = Net()
    hooks = HookSet()
    fired: list[str] = []

    def remove_all(label: str, args: tuple[Any, ...], output: Any) -> None:
        fired.append(label)
        hooks.remove()  # as an exhausted capture does, inside the forward

    hooks.hook_modules([("a", model.a), ("b", model.b)], post=remove_all)
    model(torch.randn(1, 4))
    assert fired == ["a"]
    _no_hooks(model)
    hooks.remove()

    def failing() -> None:
        raise OSError("remover failed")

    hooks.forward(model.a, lambda m, a, o: None)
    hooks.on_remove(failing)
    with pytest.raises(OSError, match="remover failed"):
        hooks.remove()
    _no_hooks(model)  # the hook registered before the failing remover is gone too


def test_cancel_from_a_hook_removes_everything() -> None:
    model = Net()
    event = threading.Event()

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        event.set()
        raise Cancelled

    with pytest.raises(Cancelled), HookSet() as hooks:
        hooks.hook_modules([("a", model.a)], pre=lambda *a: None, post=post)
        model(torch.randn(1, 4))
    assert event.is_set()
    _no_hooks(model)


def test_pairing_matches_pre_and_post_per_thread_under_interleaving() -> None:
    class Slow(nn.Module):
        def __init__(self, barrier: threading.Barrier) -> None:
            super().__init__()
            self.barrier = barrier

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Both threads are inside the same module's call at once.
            self.barrier.wait(timeout=10)
            return x + 1

    threads = 4
    model = nn.Sequential(Slow(threading.Barrier(threads)), nn.Identity())
    pairing: CallPairing[int] = CallPairing()
    matched: list[tuple[int, int, int, int]] = []  # (thread, index, payload thread, label calls)
    lock = threading.Lock()

    def pre(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        pairing.begin(label, args, threading.get_ident())

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        found = pairing.end(label, args)
        assert found is not None
        index, owner = found
        with lock:
            matched.append((threading.get_ident(), index, owner, 0))

    errors: list[BaseException] = []

    def work() -> None:
        try:
            model(torch.zeros(2))
        except BaseException as error:  # surfaced below
            errors.append(error)

    with HookSet() as hooks:
        hooks.hook_modules([("0", model[0]), ("1", model[1])], pre, post)
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert not errors
    assert len(matched) == 2 * threads
    assert all(thread == owner for thread, _, owner, _ in matched)
    assert pairing.count("0") == threads and pairing.count("1") == threads
    assert pairing.in_flight() == 0
    _no_hooks(model)


def test_pairing_numbers_calls_per_path_and_drops_stale_entries() -> None:
    pairing: CallPairing[str] = CallPairing()
    outer, inner, stale = (object(),), (object(),), (object(),)
    assert pairing.begin("m", outer, "outer") == 0
    assert pairing.begin("m", stale, "stale") == 1  # never ends (KeyboardInterrupt caught)
    assert pairing.begin("m", inner, "inner") == 2
    assert pairing.begin("other", outer, "x") == 0
    assert pairing.end("m", inner) == (2, "inner")
    assert pairing.end("m", outer) == (0, "outer")  # the stale entry above it is dropped
    assert pairing.end("m", outer) is None
    assert pairing.next_index("m") == 3
    assert pairing.in_flight() == 1  # "other"
    pairing.clear()
    assert pairing.in_flight() == 0
    assert pairing.count("m") == 4


def test_leftover_hooks_reports_what_is_left() -> None:
    model = Net()
    handle = model.a.register_forward_hook(lambda m, a, o: None)
    global_handle = torch_module.register_module_forward_hook(lambda m, a, o: None)
    try:
        left = leftover_hooks(model.modules())
        assert any("_global_forward_hooks" in entry for entry in left)
        assert any(entry.startswith("Linear._forward_hooks") for entry in left)
    finally:
        handle.remove()
        global_handle.remove()
    assert leftover_hooks(model.modules()) == []
