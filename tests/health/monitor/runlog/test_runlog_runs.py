"""One log directory, several runs: each monitor stamps its segments with a run identity,
``open_run`` reads one run and never mixes two in one series; ``resume=True`` continues the
latest run of the same model."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vinlens.health import TrainingMonitor, open_run
from vinlens.health.monitor.runlog.format import META, STEPS, encode_json, encode_record


def _steps(monitor: TrainingMonitor, model: nn.Module, n: int) -> None:
    width = next(model.parameters()).shape[1]
    for _ in range(n):

        def step_fn() -> torch.Tensor:
            model.zero_grad()
            loss = model(torch.ones(3, width)).pow(2).mean()
            loss.backward()
            return loss

        monitor.run_step(step_fn)


def _train(log: Path, model: nn.Module, n: int, **options: object) -> None:
    with TrainingMonitor(model, every=2, log_dir=log, **options) as monitor:  # type: ignore[arg-type]
        _steps(monitor, model, n)


def _small() -> nn.Module:
    return nn.Linear(2, 1)


def _large() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))


def test_a_reused_directory_reads_the_latest_run_and_lists_the_others(tmp_path: Path) -> None:
    log = tmp_path / "run"
    _train(log, _small(), 5)
    time.sleep(0.01)  # the runs' start times differ
    _train(log, _large(), 3)
    run = open_run(log)
    assert run.module_paths == ("<root>", "0", "1", "2")
    assert run.step_series().steps.tolist() == [0, 1, 2]
    assert run.history_matrix("grad_norm").values.shape == (4, 2)
    first, latest = run.runs
    assert latest.run_id == run.run_id and first.run_id != run.run_id
    assert (first.first_step, first.last_step, first.module_count) == (0, 4, 1)
    assert (latest.first_step, latest.last_step, latest.module_count) == (0, 2, 4)
    assert first.ranks == latest.ranks == (0,)

    older = open_run(log, run_id=first.run_id)
    assert older.module_paths == ("<root>",)
    assert older.step_series().steps.tolist() == [0, 1, 2, 3, 4]
    assert older.history().steps == (0, 2, 4)
    with pytest.raises(ValueError, match=r"has no run 'nope'; its runs are "):
        open_run(log, run_id="nope")


def test_a_segment_copied_in_from_another_run_stays_in_its_own_run(tmp_path: Path) -> None:
    other = tmp_path / "other"
    _train(other, _small(), 4)
    log = tmp_path / "run"
    time.sleep(0.01)
    _train(log, _large(), 3)
    (copied,) = (other / "rank-00000").iterdir()
    shutil.copy(copied, log / "rank-00000" / "seg-00000009.vlr")
    run = open_run(log)
    assert run.module_paths == ("<root>", "0", "1", "2")
    assert run.step_series().steps.tolist() == [0, 1, 2]
    assert len(run.runs) == 2


def test_two_monitors_on_one_directory_at_once_keep_their_own_series(tmp_path: Path) -> None:
    log = tmp_path / "run"
    small, large = _small(), _large()
    with (
        TrainingMonitor(small, every=1, log_dir=log) as a,
        TrainingMonitor(large, every=1, log_dir=log) as b,
    ):
        for _ in range(3):
            _steps(a, small, 1)
            _steps(b, large, 2)
    by_count = {info.module_count: info.run_id for info in open_run(log).runs}
    for count, steps in ((1, 3), (4, 6)):
        run = open_run(log, run_id=by_count[count])
        assert len(run.module_paths) == count
        assert run.step_series().steps.tolist() == list(range(steps))
        assert run.history_matrix("grad_norm").values.shape == (count, steps)


def test_resume_continues_the_latest_run_and_refuses_another_model(tmp_path: Path) -> None:
    log = tmp_path / "run"
    model = _small()
    _train(log, model, 5, resume=True)  # nothing to resume yet: a new run
    with TrainingMonitor(model, every=2, log_dir=log, resume=True) as monitor:
        assert monitor.step == 5
        _steps(monitor, model, 3)
    run = open_run(log)
    (info,) = run.runs
    assert (info.first_step, info.last_step) == (0, 7)
    assert run.step_series().steps.tolist() == list(range(8))
    assert run.sampled_steps() == (0, 2, 4, 6)
    with pytest.raises(ValueError, match=r"resume=True: the latest run in .* watched 1 module"):
        TrainingMonitor(_large(), log_dir=log, resume=True)
    # Without resume the same model starts a new run, read alone.
    _train(log, model, 2)
    assert open_run(log).step_series().steps.tolist() == [0, 1]
    assert len(open_run(log).runs) == 2


def test_a_log_written_without_run_identity_opens_as_one_run(tmp_path: Path) -> None:
    rank = tmp_path / "run" / "rank-00000"
    rank.mkdir(parents=True)
    meta = {"module_paths": ["<root>"], "fields": ["grad_norm"], "every": 1, "rank": 0}
    for seq, steps in enumerate(([0, 1, 2], [3, 4])):
        payload = (
            np.asarray([len(steps)], "<u4").tobytes()
            + np.asarray(steps, "<i8").tobytes()
            + np.asarray(steps, "<f8").tobytes() * 2
        )
        records = encode_record(META, encode_json(meta | {"started": seq})) if seq == 0 else b""
        (rank / f"seg-{seq:08d}.vlr").write_bytes(records + encode_record(STEPS, payload))
    run = open_run(tmp_path / "run")
    assert run.run_id is None
    assert run.step_series().steps.tolist() == [0, 1, 2, 3, 4]
    (info,) = run.runs
    assert (info.run_id, info.first_step, info.last_step) == (None, 0, 4)
