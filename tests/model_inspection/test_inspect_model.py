"""inspect_model: registered state only, with shared parameters counted once in totals."""

from __future__ import annotations

import pytest
import torch
from mi_models import SmallCNN, TiedLanguageModel
from torch import nn

from vinlens.model_inspection import ModuleMetadata, inspect_model


def test_transformer_totals_match_pytorch_and_rows_follow_named_modules(
    tiny_transformer: nn.Transformer,
) -> None:
    metadata = inspect_model(tiny_transformer)
    assert metadata.model_type == "torch.nn.modules.transformer.Transformer"
    assert metadata.total_parameters == sum(p.numel() for p in tiny_transformer.parameters())
    assert metadata.trainable_parameters == metadata.total_parameters
    expected_paths = [name or "<root>" for name, _ in tiny_transformer.named_modules()]
    assert [row.path for row in metadata.modules] == expected_paths
    attention = next(row for row in metadata.modules if row.path == "encoder.layers.0.self_attn")
    # in_proj_weight (3*16*16) and in_proj_bias (3*16) live directly on MultiheadAttention.
    assert attention.direct_parameters == 3 * 16 * 16 + 3 * 16
    assert attention.module_type == "torch.nn.modules.activation.MultiheadAttention"


def test_cnn_buffers_frozen_parameters_and_training_flags(small_cnn: SmallCNN) -> None:
    small_cnn.features[0].weight.requires_grad_(False)
    small_cnn.features.eval()
    metadata = inspect_model(small_cnn)
    rows = {row.path: row for row in metadata.modules}
    conv = rows["features.0"]
    assert conv == ModuleMetadata(
        "features.0", "torch.nn.modules.conv.Conv2d", 3 * 8 * 9 + 8, 8, 0, False
    )
    # running_mean, running_var (8 each) and num_batches_tracked (1).
    assert rows["features.1"].direct_buffers == 17
    assert rows["<root>"].training is True and rows["head"].training is True
    assert metadata.trainable_parameters == metadata.total_parameters - 3 * 8 * 9
    # Inspection left every flag exactly as it was.
    assert small_cnn.training and not small_cnn.features.training and small_cnn.head.training


def test_tied_weights_count_once_in_totals_and_on_each_owner() -> None:
    model = TiedLanguageModel(vocab=50, width=8)
    metadata = inspect_model(model)
    rows = {row.path: row for row in metadata.modules}
    assert rows["embed"].direct_parameters == 400
    assert rows["decoder"].direct_parameters == 400
    assert metadata.total_parameters == 400 + 8 * 8 + 8
    assert metadata.total_parameters == sum(p.numel() for p in model.parameters())


def test_shared_module_instance_is_listed_once() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    metadata = inspect_model(model)
    assert [row.path for row in metadata.modules] == ["<root>", "0", "1"]
    assert metadata.total_parameters == 20


def test_lazy_modules_count_zero_and_stay_uninitialized() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.LazyBatchNorm1d(), nn.Linear(4, 2))
    metadata = inspect_model(model)
    rows = {row.path: row for row in metadata.modules}
    assert rows["0"].direct_parameters == 0
    # LazyBatchNorm1d's running stats are uninitialized; num_batches_tracked is a real buffer.
    assert rows["1"].direct_buffers == 1
    assert metadata.total_parameters == 4 * 2 + 2
    assert isinstance(model[0].weight, nn.parameter.UninitializedParameter)
    assert model[0].has_uninitialized_params()

    model(torch.randn(3, 5))  # now initialize for real and inspect again
    after = {row.path: row for row in inspect_model(model).modules}
    assert after["0"].direct_parameters == 5 * 4 + 4
    assert after["1"].direct_parameters == 8 and after["1"].direct_buffers == 9


def test_meta_device_model_is_described_without_data() -> None:
    with torch.device("meta"):
        model = nn.Transformer(
            d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2, batch_first=True
        )
    metadata = inspect_model(model)
    assert metadata.total_parameters == sum(p.numel() for p in model.parameters())
    assert all(p.is_meta for p in model.parameters())


def test_no_hooks_run_and_nothing_moves() -> None:
    calls: list[str] = []
    model = SmallCNN()
    model.register_forward_pre_hook(lambda module, args: calls.append("pre"))
    model.register_forward_hook(lambda module, args, output: calls.append("post"))
    model.head.register_full_backward_hook(lambda *args: calls.append("backward"))
    before = {name: (p.device, p.dtype, p.requires_grad) for name, p in model.named_parameters()}
    inspect_model(model)
    assert calls == []
    after = {name: (p.device, p.dtype, p.requires_grad) for name, p in model.named_parameters()}
    assert after == before


def test_rejects_non_module() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module, got builtins\.str"):
        inspect_model("model")  # type: ignore[arg-type]


def test_garbage_collector_state_is_restored() -> None:
    import gc

    model = SmallCNN()
    assert gc.isenabled()
    inspect_model(model)
    assert gc.isenabled()
    gc.disable()
    try:
        inspect_model(model)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(TypeError):
        inspect_model(None)  # type: ignore[arg-type]
    assert gc.isenabled()
