"""Small, real torch models and hook checks shared by the model-inspection tests."""

from __future__ import annotations

import torch
from torch import nn

from vinlens.hooks import leftover_hooks


class SmallCNN(nn.Module):
    """Two conv blocks and a classifier head, the shape of a per-camera backbone."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


class TiedLanguageModel(nn.Module):
    """Embedding and output projection share one Parameter, as in weight-tied LMs."""

    def __init__(self, vocab: int = 50, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.decoder = nn.Linear(width, vocab, bias=False)
        self.decoder.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.tanh(self.mix(self.embed(tokens))))


def hook_counts(model: nn.Module) -> dict[str, tuple[int, int]]:
    """(forward pre-hooks, forward hooks) per module path: what a capture must leave behind."""
    return {
        name: (len(module._forward_pre_hooks), len(module._forward_hooks))
        for name, module in model.named_modules()
    }


def assert_no_hooks(model: nn.Module) -> None:
    leftovers = {path: counts for path, counts in hook_counts(model).items() if counts != (0, 0)}
    assert leftovers == {}
    for module in model.modules():
        assert not module._forward_pre_hooks_with_kwargs
        assert not module._forward_hooks_always_called
    # A whole-model capture taps class forwards: no tap (and no global hook) may be left.
    assert leftover_hooks(model.modules()) == []
