"""Fault injection: whatever goes wrong, the exception is the caller's and no hook survives."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch
from mi_models import SmallCNN, assert_no_hooks
from torch import nn

import vinlens.hooks
from vinlens.model_inspection import CaptureLimits, capture_model

BIG = CaptureLimits(max_tensors=10_000, max_bytes=10_000_000)


class Failing(nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner(x)
        raise self.error


@pytest.mark.parametrize("error", [ValueError("bad batch"), KeyboardInterrupt(), SystemExit(3)])
def test_forward_raising_propagates_unchanged_and_removes_hooks(error: BaseException) -> None:
    model = Failing(error)
    capture = capture_model(model, limits=BIG)
    with pytest.raises(type(error)) as info, capture:
        model(torch.ones(1, 2))
    assert info.value is error
    assert not capture.active
    assert_no_hooks(model)
    recorded = {(s.module_path, s.direction) for s in capture.snapshots}
    # Inputs were sampled; the root never produced an output, the inner Linear did.
    assert recorded == {("<root>", "input"), ("inner", "input"), ("inner", "output")}


def test_user_pre_hook_raising_before_ours() -> None:
    model = SmallCNN()
    error = RuntimeError("user pre-hook")

    def explode(module: nn.Module, args: tuple[Any, ...]) -> None:
        raise error

    user_handle = model.head.register_forward_pre_hook(explode)
    capture = capture_model(model, limits=BIG)
    with pytest.raises(RuntimeError) as info, capture:
        model(torch.randn(1, 3, 8, 8))
    assert info.value is error
    # Ours follows the user's hook, so the failing call left no head sample at all.
    assert not [s for s in capture.snapshots if s.module_path == "head"]
    # The user's hook is theirs to keep; only ours are gone.
    assert list(model.head._forward_pre_hooks) == [user_handle.id]
    user_handle.remove()
    assert_no_hooks(model)


@pytest.mark.parametrize(
    ("module_paths", "expected"),
    [
        # Instance hooks (paths picked): ours runs first and samples the input of the
        # call the user's hook then fails; the next entrance numbers its call 1.
        (["<root>"], [(0, "input"), (1, "input"), (1, "output")]),
        # The whole-model forward tap runs inside forward, after every pre-hook: the
        # failed call never reached it and left nothing pending.
        (None, [(0, "input"), (0, "output")]),
    ],
)
def test_user_pre_hook_raising_after_ours_then_reentry_pairs_correctly(
    module_paths: list[str] | None, expected: list[tuple[int, str]]
) -> None:
    model = nn.Linear(2, 2)
    capture = capture_model(model, module_paths=module_paths, limits=BIG)
    error = ValueError("late hook")
    with pytest.raises(ValueError) as info, capture:
        handle = model.register_forward_pre_hook(lambda module, args: (_ for _ in ()).throw(error))
        try:
            model(torch.zeros(1, 2))
        finally:
            handle.remove()
    assert info.value is error
    assert_no_hooks(model)
    with capture:
        model(torch.ones(1, 2))
    rows = [(s.call_index, s.direction) for s in capture.snapshots]
    assert rows == expected


def test_user_forward_hook_raising_keeps_the_error() -> None:
    model = nn.Linear(2, 2)
    error = ArithmeticError("post hook")

    def explode(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        raise error

    with pytest.raises(ArithmeticError) as info, capture_model(model, limits=BIG):
        handle = model.register_forward_hook(explode)
        try:
            model(torch.ones(1, 2))
        finally:
            handle.remove()
    assert info.value is error
    assert_no_hooks(model)


class HostileMapping(Mapping[str, Any]):
    """A user container whose iteration fails: capture must not break forward."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise OSError("mapping cannot be iterated")

    def __len__(self) -> int:
        return 1


class ReturnsHostile(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, HostileMapping]:
        return x + 1, HostileMapping()


def test_a_failing_user_container_warns_and_forward_still_returns() -> None:
    model = ReturnsHostile()
    with (
        pytest.warns(RuntimeWarning, match="mapping cannot be iterated"),
        capture_model(model, limits=BIG) as capture,
    ):
        result, _ = model(torch.zeros(2))
    assert result.tolist() == [1.0, 1.0]
    assert [s.tensor_path for s in capture.snapshots] == ["args[0]", "output[0]"]
    assert_no_hooks(model)


class ClosesItself(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Identity()
        self.capture: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.capture.close()
        return self.child(x)


def test_close_during_forward_is_safe() -> None:
    model = ClosesItself()
    capture = capture_model(model, limits=BIG)
    model.capture = capture
    with capture:
        model(torch.ones(1))
    assert [(s.module_path, s.direction) for s in capture.snapshots] == [("<root>", "input")]
    assert_no_hooks(model)


@pytest.mark.parametrize("paths", [None, ["", "0", "1"]], ids=["forward-taps", "instance-hooks"])
def test_hooks_are_removed_when_registration_fails_midway(
    monkeypatch: pytest.MonkeyPatch, paths: list[str] | None
) -> None:
    # A whole-model capture taps each module class's forward (Sequential's, then
    # Linear's); a capture of named paths registers per module. Fail the second of each.
    model = nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 1))
    sequential_forward = nn.Sequential.__dict__["forward"]
    calls = {"n": 0}
    if paths is None:
        target: Any = vinlens.hooks
        name = "_ClassTap"
        original = vinlens.hooks._ClassTap
    else:
        target, name, original = nn.Module, "register_forward_hook", nn.Module.register_forward_hook

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("simulated")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, flaky)
    capture = capture_model(model, module_paths=paths)
    with pytest.raises(MemoryError), capture:
        pass
    assert not capture.active
    assert_no_hooks(model)
    assert nn.Sequential.__dict__["forward"] is sequential_forward
