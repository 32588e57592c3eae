"""``vinlens run show|replay`` on what is not a run log or not a bundle: one line naming
the path or TARGET and what was expected, exit status 2, no traceback (``--debug`` keeps
it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vinlens.cli import main
from vinlens.health import TrainingMonitor


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """A log whose step 0 is non-finite, with its replay bundle."""
    model = torch.nn.Linear(2, 1)
    x = torch.tensor([[float("inf"), 1.0]])
    with TrainingMonitor(model, every=1, on_nonfinite="record", log_dir=tmp_path / "run") as m:

        def step_fn() -> torch.Tensor:
            model.zero_grad()
            loss = model(x).sum()
            loss.backward()
            return loss

        m.run_step(step_fn)
    return tmp_path / "run"


LINEAR = ["--model", "torch.nn.Linear", "--arg", "in_features=2", "--arg", "out_features=1"]


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out
    (line,) = out.splitlines()
    assert line.startswith(f"vinlens run {command}: ")
    return line


def test_a_regular_file_is_not_a_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("hello")
    assert main(["run", "show", str(file)]) == 2
    assert f"'{file}' is a file, not a vinlens run log" in _one_line(capsys, "show")
    assert main(["run", "replay", str(file), "--step", "0", *LINEAR]) == 2
    assert f"'{file}' is a file" in _one_line(capsys, "replay")


def test_an_empty_or_cut_short_bundle_is_named(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (bundle,) = (log / "rank-00000").glob("replay-*.pt")
    data = bundle.read_bytes()
    bundle.write_bytes(data[:-276])
    assert main(["run", "replay", str(log), "--step", "0", *LINEAR]) == 2
    assert f"'{bundle}' fails its checksum" in _one_line(capsys, "replay")
    bundle.write_bytes(b"")
    assert main(["run", "replay", str(log), "--step", "0", *LINEAR]) == 2
    assert f"'{bundle}' is empty (0 bytes)" in _one_line(capsys, "replay")
    with pytest.raises(ValueError, match="is empty"):
        main(["run", "replay", str(log), "--step", "0", *LINEAR, "--debug"])


def test_a_target_whose_constructor_raises_is_named(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = ["--model", "torch.nn.Linear", "--arg", "in_features=2", "--arg", "out_features=-1"]
    assert main(["run", "replay", str(log), "--step", "0", *bad]) == 2
    line = _one_line(capsys, "replay")
    assert "--model torch.nn.Linear: building the model raised RuntimeError" in line
    with pytest.raises(ValueError, match="negative dimension") as raised:
        main(["--debug", "run", "replay", str(log), "--step", "0", *bad])
    assert isinstance(raised.value.__cause__, RuntimeError)  # the traceback shows both
