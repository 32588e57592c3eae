"""Deep real models with planted faults, shared by the health tests."""

from __future__ import annotations

import torch
from torch import nn


class Log(nn.Module):
    """``log`` of its input: NaN for negative values, -inf for zeros."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class Block(nn.Module):
    """Linear + tanh: finite in, finite out."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def deep_model(depth: int = 12, width: int = 8, log_at: int | None = None) -> nn.Sequential:
    """``depth`` blocks; block ``log_at`` (if any) is followed by a ``Log`` of a negative shift.

    The planted module sits at path ``f"{log_at}.log"`` inside a Sequential, so the
    origin is two levels deep and its parent returns NaN too.
    """
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for index in range(depth):
        if index == log_at:
            layers.append(nn.Sequential(Block(width), _Shift(-5.0), Log()))
            # make the names readable: "k.0" block, "k.1" shift, "k.2" log
        else:
            layers.append(Block(width))
    return nn.Sequential(*layers)


class _Shift(nn.Module):
    def __init__(self, amount: float) -> None:
        super().__init__()
        self.amount = amount

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.amount


def assert_no_hooks(*models: nn.Module) -> None:
    for model in models:
        for name, module in model.named_modules():
            assert not module._forward_pre_hooks, name
            assert not module._forward_hooks, name
            assert not module._forward_pre_hooks_with_kwargs, name
            assert not module._forward_hooks_always_called, name
            assert not module._forward_hooks_with_kwargs, name
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks
