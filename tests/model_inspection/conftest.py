"""Fixtures for the model-inspection tests."""

from __future__ import annotations

import pytest
import torch
from mi_models import SmallCNN
from torch import nn


@pytest.fixture
def small_cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN()


@pytest.fixture
def tiny_transformer() -> nn.Transformer:
    torch.manual_seed(0)
    return nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=2,
        num_decoder_layers=1,
        dim_feedforward=32,
        dropout=0.0,
        batch_first=True,
    )
