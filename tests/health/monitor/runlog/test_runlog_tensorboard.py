"""TrainingRun.export_tensorboard, read back with TensorBoard's own event reader."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from runlog_train import batch, build_model

from vinlens.health import TrainingMonitor, open_run

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
tensor_util = pytest.importorskip("tensorboard.util.tensor_util")

NAN_STEP = 23


def _run(log: Path, steps: int = 40, every: int = 4) -> TrainingMonitor:
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TrainingMonitor(model, every=every, on_nonfinite="record", log_dir=log) as monitor:
        for step in range(steps):
            x = batch(step, NAN_STEP)

            def step_fn() -> torch.Tensor | None:
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()  # noqa: B023 (run within the iteration)
                loss.backward()
                return loss if step % 10 else None  # some steps report no loss  # noqa: B023

            before = len(monitor.events)
            monitor.run_step(step_fn)
            if len(monitor.events) == before:
                optimizer.step()
    return monitor


def _read(directory: str) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(directory, size_guidance={"scalars": 0, "tensors": 0})
    return acc.Reload()


def test_the_export_holds_every_step_every_module_norm_and_the_events(tmp_path: Path) -> None:
    monitor = _run(tmp_path / "run")
    run = open_run(tmp_path / "run")
    # Every field of the event is logged (repr: the origin's summaries hold NaN).
    assert repr(run.events) == repr(tuple(monitor.events))
    assert run.events[0].replayed and run.events[0].made_on_ranks == (0,)
    (written,) = run.export_tensorboard(tmp_path / "tb")
    assert written == str(tmp_path / "tb" / "rank0")
    acc = _read(written)
    series = run.step_series()
    norms = acc.Scalars("vinlens/grad_norm")
    assert [e.step for e in norms] == series.steps.tolist()
    # TensorBoard keeps float32: the exported value is the logged one rounded once.
    np.testing.assert_array_equal(
        [e.value for e in norms], series.grad_norm.astype(np.float32).astype(np.float64)
    )
    losses = acc.Scalars("vinlens/loss")
    has_loss = ~np.isnan(series.loss)
    assert not has_loss.all() and has_loss.any()
    assert [e.step for e in losses] == series.steps[has_loss].tolist()
    np.testing.assert_array_equal(
        [e.value for e in losses], series.loss[has_loss].astype(np.float32)
    )
    matrix = run.history_matrix("grad_norm")
    for row, path in enumerate(matrix.module_paths):
        points = acc.Scalars(f"vinlens/grad_norm/{path}")
        assert tuple(e.step for e in points) == matrix.steps
        np.testing.assert_array_equal(
            [e.value for e in points], matrix.values[row].astype(np.float32)
        )
    (text,) = acc.Tensors("vinlens/events")
    assert text.step == NAN_STEP
    message = tensor_util.make_ndarray(text.tensor_proto).item().decode()
    assert message.startswith(f"step {NAN_STEP}, rank 0: origin `1` (call 0)")
    assert "`1.weight`" in message


def test_every_rank_is_its_own_tensorboard_run(tmp_path: Path) -> None:
    """Two ranks' writers in one directory, as torchrun's processes write it."""
    from vinlens.health.monitor.runlog.writer import RunLogWriter

    fields = ["count", "mean", "std", "min", "max", "abs_max", "zero_fraction"]
    fields += ["nan_count", "posinf_count", "neginf_count", "grad_norm"]
    rng = np.random.default_rng(0)
    blocks = rng.standard_normal((2, 5, 3, len(fields)))
    for rank in (0, 1):
        meta = {"module_paths": ["a", "b", "c"], "fields": fields, "every": 2, "rank": rank}
        writer = RunLogWriter(tmp_path / "run", storage_options=None, rank=rank, meta=meta)
        try:
            for i, block in enumerate(blocks[rank]):
                writer.step(2 * i, float(rank + i), float(10 * rank + i))
                writer.sample(2 * i, block)
        finally:
            writer.close()
    run = open_run(tmp_path / "run")
    assert run.ranks == (0, 1)
    written = run.export_tensorboard(tmp_path / "tb")
    assert written == (str(tmp_path / "tb" / "rank0"), str(tmp_path / "tb" / "rank1"))
    for rank, directory in enumerate(written):
        acc = _read(directory)
        assert [e.value for e in acc.Scalars("vinlens/loss")] == [10 * rank + i for i in range(5)]
        points = acc.Scalars("vinlens/grad_norm/b")
        assert [e.step for e in points] == [0, 2, 4, 6, 8]
        np.testing.assert_array_equal(
            [e.value for e in points], blocks[rank, :, 1, -1].astype(np.float32)
        )


def test_a_url_or_a_file_is_refused_with_its_name(tmp_path: Path) -> None:
    _run(tmp_path / "run", steps=6)
    run = open_run(tmp_path / "run")
    with pytest.raises(ValueError, match="s3://bucket/tb"):
        run.export_tensorboard("s3://bucket/tb")
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        run.export_tensorboard(target)


def test_without_the_extra_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(tmp_path / "run", steps=6)
    run = open_run(tmp_path / "run")
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError, match=r"vinlens\[tensorboard\]"):
        run.export_tensorboard(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()
