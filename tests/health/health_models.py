"""Deep real models with planted faults, shared by the health tests."""

from __future__ import annotations

import torch
from torch import nn

from vinlens.hooks import leftover_hooks


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


class NanBackward(torch.autograd.Function):
    """Identity forward; its backward turns the incoming gradient into NaN."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


class RandomFault(nn.Module):
    """A NaN backward on a random fraction of its calls, drawn from torch's generator."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.rate = rate
        self.fired: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        fire = bool(torch.rand(()) < self.rate)
        self.fired.append(fire)
        out: torch.Tensor = NanBackward.apply(h) if fire else h
        return out


def assert_no_hooks(*models: nn.Module) -> None:
    for model in models:
        for name, module in model.named_modules():
            assert not module._forward_pre_hooks, name
            assert not module._forward_hooks, name
            assert not module._forward_pre_hooks_with_kwargs, name
            assert not module._forward_hooks_always_called, name
            assert not module._forward_hooks_with_kwargs, name
    assert leftover_hooks() == []  # global hooks and forward taps


class StatsNet(nn.Module):
    """A small CNN built the same on every worker (seeded), for the executor tests."""

    def __init__(self, width: int = 6, seed: int = 0) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width))
        self.act = nn.ReLU()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 3))
        torch.random.set_rng_state(generator_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.stem(x)))


def stats_batch(index: int) -> torch.Tensor:
    """Batch ``index`` of the executor tests, the same wherever it is made."""
    generator = torch.Generator().manual_seed(100 + index)
    return torch.randn(2, 3, 12, 12, generator=generator) * 3 + 0.25


def load_stats_shard(index: int) -> list[torch.Tensor]:
    """Shard ``index``: three batches, loaded on the worker by index alone."""
    return [stats_batch(3 * index + offset) for offset in range(3)]


def run_scaled(model: nn.Module, batch: torch.Tensor) -> object:
    """A top-level ``run`` (what an executor can send)."""
    return model(batch * 0.5)


class _Amplify(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by ``boost.factor``."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, boost: Boost
    ) -> torch.Tensor:
        ctx.boost = boost  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        boost: Boost = ctx.boost  # type: ignore[attr-defined]
        boost.incoming = float(grad.abs().max())
        return grad * boost.factor, None


class Boost(nn.Module):
    """Identity forward; its backward multiplies the gradient by ``factor`` (a planted
    overflow of the scaled gradient, made inside this module) and records the largest
    incoming magnitude."""

    def __init__(self) -> None:
        super().__init__()
        self.factor = 1.0
        self.incoming = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _Amplify.apply(x, self)
        return out
