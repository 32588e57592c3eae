"""The run log: a training script's log opened while it grows and after; torn tails."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from vinlens.health import TrainingMonitor, TrainingRun, open_run
from vinlens.health.monitor.runlog.format import (
    FINGERPRINTS,
    META,
    ORDER,
    RUN,
    SAMPLES,
    STEPS,
    iter_records,
    sample_index,
)

SCRIPT = Path(__file__).parents[2] / "runlog_train.py"


def _train(log_dir: Path, *args: str, timeout: float = 120) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), str(log_dir), *args],
        check=True,
        timeout=timeout,
        stdout=subprocess.DEVNULL,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )


def test_a_script_log_equals_the_monitor_and_names_the_planted_nan(tmp_path: Path) -> None:
    log = tmp_path / "run"
    _train(
        log, "--steps", "120", "--nan-step", "37", "--every", "5", "--dump", str(tmp_path / "m.npz")
    )
    run = open_run(log)
    assert run.ranks == (0,)
    assert run.module_paths == ("<root>", "0", "1", "2", "3", "4")
    series = run.step_series()
    np.testing.assert_array_equal(series.steps, np.arange(120))
    assert math.isnan(series.grad_norm[37]) and np.isfinite(np.delete(series.grad_norm, 37)).all()
    assert np.isfinite(series.loss).all()
    (event,) = run.events
    assert (event.step, event.rank) == (37, 0)
    assert event.origin is not None
    assert (event.origin.module_path, event.origin.call_index) == ("1", 0)
    assert event.origin.parameter_paths == ("1.weight",)
    dumped = np.load(tmp_path / "m.npz")
    for field in ("grad_norm", "mean", "std", "max", "nan_count"):
        matrix = run.history_matrix(field)
        assert matrix.steps == tuple(dumped["steps"])
        np.testing.assert_array_equal(matrix.values, dumped[field])
    history = run.history()
    assert history.steps == tuple(range(0, 120, 5)) and history.samples == 24
    assert history.steps_run == 120
    np.testing.assert_array_equal(history.modules["1"].grad_norm, dumped["grad_norm"][2])


def test_the_global_norm_and_loss_are_the_steps_own(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    x = torch.randn(5, 3)
    norms, losses = [], []
    with TrainingMonitor(model, every=3, log_dir=tmp_path / "r") as monitor:
        for _ in range(7):

            def step_fn() -> torch.Tensor:
                model.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss

            losses.append(float(monitor.run_step(step_fn).detach()))
            grads = [p.grad for p in model.parameters()]
            norms.append(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))))
    series = open_run(tmp_path / "r").step_series()
    np.testing.assert_allclose(series.grad_norm, norms, rtol=1e-6)
    np.testing.assert_array_equal(series.loss, losses)


def test_a_reader_sees_the_log_grow_with_every_record_whole(tmp_path: Path) -> None:
    log = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(log), "--steps", "700", "--sleep", "0.01"],
        stdout=subprocess.DEVNULL,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 90
        run = None
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if run is None:
                try:
                    run = open_run(log)
                except FileNotFoundError:
                    continue
            steps = run.refresh().step_series().steps
            np.testing.assert_array_equal(steps, np.arange(len(steps)))
            sampled = run.sampled_steps()
            assert sampled == tuple(range(0, 5 * len(sampled), 5))
            seen.append(len(steps))
    finally:
        process.kill() if process.poll() is None else None
        process.wait(timeout=30)
    assert process.returncode == 0
    grown = [n for n in seen if 0 < n < 700]
    assert len(set(grown)) >= 2, seen  # the live reader saw the run move
    assert open_run(log).step_series().steps.tolist() == list(range(700))


def test_a_torn_tail_is_ignored_at_every_cut(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    with TrainingMonitor(model, every=2, log_dir=tmp_path / "whole") as monitor:
        for _ in range(5):
            monitor.run_step(lambda: model(torch.ones(1, 2)).sum().backward())
    (segment,) = (tmp_path / "whole" / "rank-00000").iterdir()
    data = segment.read_bytes()
    ends = [end for _, _, end in iter_records(data)]
    cut_dir = tmp_path / "cut" / "rank-00000"
    cut_dir.mkdir(parents=True)
    for cut in range(ends[1], len(data)):
        (cut_dir / segment.name).write_bytes(data[:cut])
        run = open_run(tmp_path / "cut")
        whole = max(e for e in ends if e <= cut)
        expected = open_run_bytes(tmp_path / "exp", segment.name, data[:whole])
        assert run.sampled_steps() == expected.sampled_steps()
        np.testing.assert_array_equal(run.step_series().steps, expected.step_series().steps)
    # Records: the run identity, meta, the order of outputs and gradients (sampled step 0),
    # the sampled steps 0, 2, 4 (one record), the steps' fingerprints, then the steps.
    kinds = [kind for kind, _, _ in iter_records(data)]
    assert kinds == [RUN, META, ORDER, SAMPLES, FINGERPRINTS, STEPS]
    start = {kind: ([0, *ends])[i] for i, kind in enumerate(kinds)}  # where each record begins
    end = dict(zip(kinds, ends, strict=True))
    whole_run = open_run(tmp_path / "whole")

    def flipped(at: int) -> TrainingRun:
        corrupt = bytearray(data)
        corrupt[at] ^= 0xFF
        (cut_dir / segment.name).write_bytes(bytes(corrupt))
        return open_run(tmp_path / "cut")

    # A flipped byte inside a record's checksummed part with a whole record after it is
    # damage: skipped, reported, the records after it kept.
    with pytest.warns(RuntimeWarning, match="sampled steps record"):
        broken = flipped(start[SAMPLES] + 20)  # the sampled steps' index
    assert broken.sampled_steps() == () and len(broken.step_series().steps) == 5
    (damage,) = broken.damaged
    assert (damage.offset, damage.length, damage.steps) == (
        start[SAMPLES],
        end[SAMPLES] - start[SAMPLES],
        range(0),
    )
    # In the last record of the rank's last segment it is a torn tail: not read, not damage.
    broken = flipped(start[STEPS] + 20)  # the steps
    assert broken.sampled_steps() == (0, 2, 4) and len(broken.step_series().steps) == 0
    assert broken.damaged == ()
    # A flipped byte in one field's values fails that field's checksum when it is read;
    # the other fields read as written.
    _, _, modules, values = sample_index(data, start[SAMPLES] + 16)
    fields = list(whole_run.meta()["fields"])
    column = fields.index("grad_norm")
    broken = flipped(values + 8 * (column * 3 * modules + 1) + 3)
    with pytest.raises(ValueError, match=r"'grad_norm' at byte \d+ fail their checksum"):
        broken.history_matrix("grad_norm")
    with pytest.raises(ValueError, match="fail their checksum"):
        broken.history()
    np.testing.assert_array_equal(
        broken.history_matrix("mean").values, whole_run.history_matrix("mean").values
    )


def open_run_bytes(root: Path, name: str, data: bytes):  # type: ignore[no-untyped-def]
    (root / "rank-00000").mkdir(parents=True, exist_ok=True)
    (root / "rank-00000" / name).write_bytes(data)
    return open_run(root)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_at_a_random_moment_leaves_a_prefix_of_the_whole_run(
    tmp_path: Path, seed: int
) -> None:
    whole = tmp_path / "whole"
    _train(whole, "--steps", "300", "--every", "3")
    reference = open_run(whole)
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            str(killed),
            "--steps",
            "300",
            "--every",
            "3",
            "--sleep",
            "0.005",
        ],
        stdout=subprocess.PIPE,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert process.stdout is not None
    target = random.Random(seed).randrange(5, 280)
    for line in process.stdout:
        if int(line) >= target:
            break
    time.sleep(random.Random(seed).random() * 0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    run = open_run(killed)
    got, want = run.step_series(), reference.step_series()
    n = len(got.steps)
    for name in ("steps", "grad_norm", "loss"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name)[:n])
    sampled = run.sampled_steps()
    assert sampled == reference.sampled_steps()[: len(sampled)]
    for field in ("grad_norm", "mean"):
        np.testing.assert_array_equal(
            run.history_matrix(field).values,
            reference.history_matrix(field).values[:, : len(sampled)],
        )
    assert [e.step for e in run.events] == [e.step for e in reference.events if e.step < 300][
        : len(run.events)
    ]


def test_a_failing_destination_raises_on_the_training_side_and_keeps_history(
    tmp_path: Path,
) -> None:
    code = f"""
import resource, signal, sys, torch
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from vinlens.health import TrainingMonitor, RunLogError
model = torch.nn.Linear(64, 64)
monitor = TrainingMonitor(model, every=1, log_dir={str(tmp_path / "r")!r})
resource.setrlimit(resource.RLIMIT_FSIZE, (5_000, 5_000))
x = torch.ones(1, 64)
try:
    for _ in range(400):
        monitor.run_step(lambda: model(x).sum().backward())
        monitor._log.flush()
except RunLogError as error:
    print("ERROR", monitor.step, monitor.history.samples, error)
    monitor.run_step(lambda: model(x).sum().backward())
    print("AFTER", monitor.history.samples)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "ERROR" in out, out
    error_line = next(line for line in out.splitlines() if line.startswith("ERROR"))
    _, step, samples, *message = error_line.split()
    assert int(samples) == int(step)  # every step run is kept in memory
    assert "rank-00000" in " ".join(message) and "File too large" in " ".join(message)
    assert "AFTER" in out


def _write_synthetic(log: Path, modules: int, samples: int, seed: int = 0) -> np.ndarray:
    """A run log of ``samples`` sampled steps of ``modules`` modules written by the
    monitor's writer; returns the ``(samples, modules, fields)`` blocks written."""
    from vinlens.health.monitor.runlog.writer import RunLogWriter

    fields = ["count", "mean", "std", "min", "max", "abs_max", "zero_fraction"]
    fields += ["nan_count", "posinf_count", "neginf_count", "grad_norm"]
    meta = {"module_paths": [f"m{i}" for i in range(modules)], "fields": fields, "every": 1}
    rng = np.random.default_rng(seed)
    blocks = rng.standard_normal((samples, modules, len(fields)))
    writer = RunLogWriter(log, storage_options=None, rank=0, meta=meta)
    try:
        for step, block in enumerate(blocks):
            writer.sample(step, block)
            writer.step(step, 1.0, 2.0)
    finally:
        writer.close()
    return blocks


def test_the_reader_holds_no_copy_of_the_log(tmp_path: Path) -> None:
    import tracemalloc

    log = tmp_path / "run"
    blocks = _write_synthetic(log, modules=400, samples=600)
    size = sum(p.stat().st_size for p in (log / "rank-00000").iterdir())
    assert size > 20e6
    tracemalloc.start()
    try:
        run = open_run(log)
        opened, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        matrix = run.history_matrix("grad_norm")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert opened < size / 20, (opened, size)  # offsets only, not the segments' bytes
    assert peak < 1.5 * matrix.values.nbytes + 1e6, (peak, matrix.values.nbytes)
    np.testing.assert_array_equal(matrix.values, blocks[:, :, -1].T)
    assert matrix.steps == tuple(range(600))
    np.testing.assert_array_equal(run.history_matrix("std").values, blocks[:, :, 2].T)
