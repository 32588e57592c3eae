"""Replay bundles: the failing step re-executed in a fresh process on a fresh model."""

from __future__ import annotations

import inspect
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vinlens.health import TrainingMonitor, load_replay, open_run
from vinlens.health.monitor.runlog import DEFAULT_REPLAY_MAX_BYTES

HERE = Path(__file__).parents[2]
SCRIPT = HERE / "runlog_train.py"
ENV = os.environ | {"OMP_NUM_THREADS": "1"}


def _train(log_dir: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), str(log_dir), "--steps", "60", *args],
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        env=ENV,
    )


def test_the_replay_in_a_fresh_process_into_a_fresh_model_gives_the_recorded_origin(
    tmp_path: Path,
) -> None:
    log = tmp_path / "run"
    _train(log, "--nan-step", "23")
    assert open_run(log).replay_steps() == (23,)
    code = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from runlog_train import build_model
from vinlens.health import open_run
run = open_run({str(log)!r})
replay = run.load_replay(23, model=build_model(seed=99))  # other weights: the bundle's win
again = replay.run()
rec = replay.origin
print(replay.step, replay.state_restored)
print(rec.module_path, rec.call_index, rec.parameter_paths)
print(again.module_path, again.call_index, again.parameter_paths)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV
    )
    assert out.returncode == 0, out.stderr
    head, recorded, recomputed = out.stdout.splitlines()
    assert head == "23 True"
    assert recorded == "1 0 ('1.weight',)"
    assert recomputed == recorded


def test_replay_forward_repeats_and_step_fn_reproduces_the_gradients(tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE))
    try:
        from runlog_train import build_model
    finally:
        sys.path.remove(str(HERE))
    log = tmp_path / "run"
    _train(log, "--nan-step", "11")
    model = build_model(seed=3)
    replay = open_run(log).load_replay(11, model=model)
    assert not torch.equal(model[0].weight, build_model(seed=3)[0].weight)  # bundle's state
    model.train()
    first, second = replay.forward(), replay.forward()
    torch.testing.assert_close(first, second)  # the dropout mask comes from the bundle
    replay.step_fn()
    assert model[1].weight.grad is not None and model[1].weight.grad.isnan().all()
    origin = replay.run()
    assert origin is not None and origin.module_path == "1"


def test_a_bundle_over_the_bound_keeps_inputs_and_says_where_the_state_comes_from(
    tmp_path: Path,
) -> None:
    sys.path.insert(0, str(HERE))
    try:
        from runlog_train import build_model
    finally:
        sys.path.remove(str(HERE))
    log = tmp_path / "run"
    _train(log, "--nan-step", "5", "--replay-max-bytes", "1")
    replay = open_run(log).load_replay(5, model=build_model())
    assert not replay.state_restored
    assert replay.note is not None and "replay_max_bytes" in replay.note
    assert "checkpoint" in replay.note
    origin = replay.run()  # the planted fault is in the inputs: the weights are not needed
    assert origin is not None and origin.module_path == "1"
    default = inspect.signature(TrainingMonitor).parameters["replay_max_bytes"].default
    assert default == DEFAULT_REPLAY_MAX_BYTES


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.marker,))


def test_a_bundle_whose_pickle_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"format": 1, "step": 0, "payload": _Evil(marker)}, buffer)
    bundle = tmp_path / "replay-000000000000.pt"
    bundle.write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="weights_only=True"):
        load_replay(bundle, torch.nn.Linear(2, 2))
    assert not marker.exists()
    with pytest.raises(FileNotFoundError, match="no replay bundle"):
        load_replay(tmp_path / "missing.pt", torch.nn.Linear(2, 2))


def test_a_step_without_a_bundle_is_named(tmp_path: Path) -> None:
    _train(tmp_path / "run", "--nan-step", "7")
    with pytest.raises(ValueError, match=r"no replay bundle for step 8 \(steps with one: 7\)"):
        open_run(tmp_path / "run").load_replay(8, model=torch.nn.Linear(1, 1))


def test_the_bundle_holds_the_buffers_as_the_failing_step_started(tmp_path: Path) -> None:
    """Running statistics are copied into storage allocated once each step (one fused copy);
    a buffer replaced between steps is found by identity and copied from then on."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)
    ).train()
    batches = [torch.randn(8, 3) for _ in range(6)]
    batches[4][2, 0] = float("inf")
    starts = {}
    with TrainingMonitor(model, every=2, on_nonfinite="record", log_dir=tmp_path / "run") as m:
        for step, x in enumerate(batches):
            if step == 3:  # a new tensor under the same buffer name
                model[1].running_var = torch.full((4,), 2.0)
            starts[step] = {k: v.clone() for k, v in model[1].state_dict().items()}

            def step_fn(x: torch.Tensor = x) -> torch.Tensor:
                model.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss

            m.run_step(step_fn)
    assert [e.step for e in m.events] == [4]
    fresh = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)
    ).train()
    replay = open_run(tmp_path / "run").load_replay(4, model=fresh)
    for name, value in starts[4].items():
        torch.testing.assert_close(fresh[1].state_dict()[name], value, rtol=0, atol=0)
    assert not torch.equal(starts[4]["running_var"], starts[3]["running_var"])
    origin = replay.run()
    assert origin is not None
