"""``vinlens model``: table, truncation, JSON and the capture summary, through cli.main."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from vinlens.cli import main
from vinlens.cli.model import example_inputs

SMALL_TRANSFORMER = [
    "torch.nn.Transformer",
    "--d-model",
    "16",
    "--arg",
    "nhead=2",
    "--arg",
    "num_encoder_layers=1",
    "--arg",
    "num_decoder_layers=1",
    "--arg",
    "dim_feedforward=32",
    "--batch-first",
]


def test_table_is_truncated_with_a_count_and_capture_is_summarised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", *SMALL_TRANSFORMER, "--limit", "5", "--snapshots", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("torch.nn.modules.transformer.Transformer: ")
    header = lines[2].split()
    assert header == ["path", "type", "params", "trainable", "buffers", "mode"]
    assert lines[4].split()[:2] == ["<root>", "Transformer"]
    assert "... 26 more modules (use --all to list every module)" in out
    quota = re.search(r"snapshots (\d+)/64, sampled bytes ([\d,]+)/16,384", out)
    assert quota is not None
    count = int(quota.group(1))
    assert 0 < count <= 64
    assert "(2, 10, 16) float32, (2, 9, 16) float32" in out
    rows = lines[lines.index(next(line for line in lines if line.startswith("module "))) + 2 :]
    assert rows[0].split()[:6] == ["<root>", "0", "input", "args[0]", "2x10x16", "float32"]
    assert f"... {count - 3} more snapshots" in out


def test_all_lists_every_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", *SMALL_TRANSFORMER, "--all", "--no-capture"]) == 0
    out = capsys.readouterr().out
    assert "more modules" not in out and "Capture" not in out
    assert "decoder.layers.0.multihead_attn.out_proj" in out


def test_json_is_complete_and_parseable(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "model",
                "torch.nn.Conv2d",
                "--arg",
                "in_channels=3",
                "--arg",
                "out_channels=4",
                "--arg",
                "kernel_size=3",
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["model"]["total_parameters"] == 3 * 4 * 9 + 4
    assert payload["model"]["modules"][0]["path"] == "<root>"
    capture = payload["capture"]
    assert capture["inputs"] == [{"shape": [2, 3, 32, 32], "dtype": "torch.float32"}]
    assert [s["direction"] for s in capture["snapshots"]] == ["input", "output"]
    assert capture["snapshots"][1]["shape"] == [2, 4, 30, 30]
    assert capture["sampled_bytes"] == 2 * 32 * 4


def test_input_shape_for_containers_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "nn.Flatten", "--input-shape", "2,3,4"]) == 0
    assert "(2, 3, 4) float32" in capsys.readouterr().out
    assert main(["model", "nn.Flatten"]) == 1
    assert "pass --input-shape" in capsys.readouterr().err
    assert main(["model", "torch.nn.NotAThing"]) == 1
    err = capsys.readouterr().err
    assert "'torch.nn.NotAThing' does not exist" in err and "no name 'NotAThing'" in err
    assert "nn.Module class" not in err
    assert main(["model", "torch.nn.functional.relu"]) == 1
    assert "is a function returning Tensor, not an nn.Module class" in capsys.readouterr().err
    assert main(["model", "torch.Tensor"]) == 1
    assert "exists but is a class Tensor, not an nn.Module class" in capsys.readouterr().err
    assert main(["model", "torch.pi"]) == 1
    assert "exists but is a float, not an nn.Module class" in capsys.readouterr().err
    assert main(["model", "no_such_package.Model"]) == 1
    assert "cannot import 'no_such_package'" in capsys.readouterr().err
    assert main(["model", "nn.Linear", "--arg", "bogus"]) == 1
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["model", "nn.Linear", "--arg", "in_features=2"]) == 1
    assert "cannot construct torch.nn.Linear" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["model", "nn.Linear", "--batch", "0"])
    assert info.value.code == 2
    assert "--batch: expected a positive integer, got 0" in capsys.readouterr().err


def test_example_inputs_follow_the_layer() -> None:
    lstm = torch.nn.LSTM(input_size=7, hidden_size=3, batch_first=True)
    assert example_inputs(lstm, batch=4, seq_len=5)[0].shape == (4, 5, 7)
    embedding = torch.nn.Sequential(torch.nn.Embedding(11, 4), torch.nn.Linear(4, 2))
    (tokens,) = example_inputs(embedding, batch=2, seq_len=3)
    assert tokens.dtype == torch.int64 and int(tokens.max()) < 11


def _numbers_right_aligned(lines: list[str], header_line: int, column: str) -> None:
    """Every row's value in ``column`` ends where the header's name ends."""
    header = lines[header_line]
    end = header.index(column) + len(column)
    rows = lines[header_line + 2 :]
    assert rows
    for row in rows:
        assert row[end - 1].isdigit() and (len(row) == end or row[end] == " "), row


def test_numbers_are_right_aligned_with_thousands_separators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "nn.Linear", "--arg", "in_features=100", "--arg", "out_features=30",
                 "--no-capture"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("3,030 parameters (3,030 trainable), 1 modules")
    _numbers_right_aligned(lines, 2, "params")
    assert lines[4].split()[2] == "3,030"


def _dropout_model_outputs(train: bool, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    argv = ["model", "nn.Dropout", "--arg", "p=0.5", "--input-shape", "4,64", "--json"]
    assert main([*argv, "--train"] if train else argv) == 0
    payload = json.loads(capsys.readouterr().out)
    capture = payload["capture"]
    inputs, outputs = (
        [s for s in capture["snapshots"] if s["direction"] == d] for d in ("input", "output")
    )
    return {
        "mode": capture["mode"],
        "training": payload["model"]["modules"][0]["training"],
        "same": inputs[0]["values"] == outputs[0]["values"],
    }


def test_capture_runs_in_eval_mode_unless_train_is_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Dropout is the identity in eval mode and zeroes about half the values in train mode.
    assert _dropout_model_outputs(False, capsys) == {
        "mode": "eval",
        "training": False,
        "same": True,
    }
    assert _dropout_model_outputs(True, capsys) == {
        "mode": "train",
        "training": True,
        "same": False,
    }

    assert main(["model", "nn.Dropout", "--input-shape", "2,3"]) == 0
    out = capsys.readouterr().out
    assert "eval mode (dropout off; --train to capture in train mode)" in out
    assert main(["model", "nn.Dropout", "--input-shape", "2,3", "--train"]) == 0
    assert "train mode (dropout active; from --train)" in capsys.readouterr().out


def test_missing_constructor_arguments_are_named_with_the_arg_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "torch.nn.Linear"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "pass them with --arg, e.g. --arg in_features=VALUE --arg out_features=VALUE" in err
    assert main(["model", "nn.Linear", "--arg", "in_features=2"]) == 1
    err = capsys.readouterr().err
    assert "--arg out_features=VALUE" in err and "--arg in_features" not in err


def test_an_extension_built_for_another_torch_is_said_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    real = importlib.import_module

    def import_module(name: str, package: str | None = None):  # type: ignore[no-untyped-def]
        # What a torchvision wheel built for a CUDA torch does next to the CPU torch.
        if name == "torchvision.models":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert main(["model", "torchvision.models.resnet18"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "operator torchvision::nms does not exist" in err
    assert f"built for another torch than the installed torch {torch.__version__}" in err
    assert "install the torchvision release built for" in err


_FACTORIES = """
import torch
from torch import nn


def small_cnn(width=8, classes=3):
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(classes))


def not_a_model(width=8):
    return {"width": width}
"""


def test_a_factory_function_builds_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_factories.py").write_text(_FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(
        ["model", "my_factories.small_cnn", "--arg", "width=4", "--input-shape", "2,3,10,10"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Sequential" in out and "Conv2d" in out
    assert "(2, 3, 10, 10) float32" in out
    assert main(["model", "my_factories.not_a_model"]) == 1
    assert "returned a builtins.dict, not an nn.Module" in capsys.readouterr().err
    assert main(["model", "my_factories.small_cnn", "--arg", "depth=2"]) == 1
    assert "cannot construct my_factories.small_cnn" in capsys.readouterr().err
