"""vinlens.attribution.state: training flags, requires_grad and .grad come back as they were."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vinlens.attribution.state import (
    explanation_mode,
    saved_grads,
    saved_requires_grad,
    saved_training_flags,
)


def _model() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.5), nn.Linear(3, 1))
    model.train()
    model[1].eval()  # deliberately mixed
    model[0].weight.requires_grad_(False)
    return model


@pytest.mark.parametrize("fail", [False, True])
def test_explanation_mode_restores_mixed_flags_on_every_exit(fail: bool) -> None:
    model = _model()
    before = [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]
    try:
        with explanation_mode(model, enable_parameter_grads=True):
            assert not any(m.training for m in model.modules())
            assert all(p.requires_grad for p in model.parameters())
            if fail:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        assert fail
    after = [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]
    assert after == before


def test_saved_grads_puts_back_the_same_grad_objects_and_nones() -> None:
    model = _model()
    model(torch.randn(4, 3)).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert grads[0] is None  # frozen weight
    kept = [None if g is None else g.clone() for g in grads]
    with pytest.raises(ValueError), saved_grads(model):
        for p in model.parameters():
            p.grad = torch.full_like(p, 7.0)
        raise ValueError
    for p, grad, copy in zip(model.parameters(), grads, kept, strict=True):
        assert p.grad is grad
        if copy is not None:
            torch.testing.assert_close(p.grad, copy)


def test_the_single_savers_restore_only_their_own_state() -> None:
    model = _model()
    with saved_training_flags(model):
        model.eval()
        model[0].weight.requires_grad_(True)
    assert model.training and not model[1].training
    assert model[0].weight.requires_grad  # not saved by saved_training_flags
    with saved_requires_grad(model):
        for p in model.parameters():
            p.requires_grad_(False)
        model.eval()
    assert all(p.requires_grad for p in model.parameters())
    assert not model.training  # not saved by saved_requires_grad
