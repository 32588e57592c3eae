"""Damage in a run log: a record that fails its checksum with whole records after it is
skipped and reported, not taken for a torn tail; a replay bundle whose bytes changed is
refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from vinlens.cli import main
from vinlens.health import TrainingMonitor, open_run
from vinlens.health.monitor.runlog import RunDamage
from vinlens.health.monitor.runlog.format import (
    HEADER_SIZE,
    SAMPLES,
    STEPS,
    iter_records,
)
from vinlens.health.monitor.runlog.writer import RunLogWriter

PATHS = ["a", "b"]
FIELDS = ["grad_norm", "mean"]


def _write(log: Path, flushes: range, *, steps_per_flush: int = 2) -> Path:
    """One writer: per flush, ``steps_per_flush`` steps (the first one sampled), flushed
    as a sampled-steps and a steps record; returns its segment."""
    meta = {
        "run_id": "r1",
        "module_paths": PATHS,
        "fields": FIELDS,
        "every": steps_per_flush,
        "rank": 0,
        "started": time.time(),
    }
    writer = RunLogWriter(log, storage_options=None, rank=0, meta=meta, flush_interval=3600)
    for flush in flushes:
        for step in range(flush * steps_per_flush, (flush + 1) * steps_per_flush):
            writer.step(step, float(step), float(-step))
            if step % steps_per_flush == 0:
                writer.sample(step, np.full((len(PATHS), len(FIELDS)), float(step)))
        writer.flush()
    writer.close()
    return sorted((log / "rank-00000").iterdir())[-1]


def _records(segment: Path) -> list[tuple[int, int, int]]:
    """``(kind, start, end)`` of each record of the segment."""
    data = segment.read_bytes()
    return [(kind, payload - HEADER_SIZE, end) for kind, payload, end in iter_records(data)]


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_byte_mid_segment_loses_that_record_only_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run"
    segment = _write(log, range(6))  # run identity, metadata, then 6 x (samples, steps)
    records = _records(segment)
    assert len(records) == 14
    kind, start, end = records[5]  # the steps of the second flush: steps 2 and 3
    assert kind == STEPS
    _flip(segment, start + HEADER_SIZE + 9)
    with pytest.warns(RuntimeWarning, match=r"steps 2\.\.3 missing"):
        run = open_run(log)
    steps = run.step_series().steps.tolist()
    assert steps == [0, 1, *range(4, 12)]
    assert run.sampled_steps() == tuple(range(0, 12, 2))
    assert run.damaged == (RunDamage(0, str(segment), start, end - start, "steps", range(2, 4)),)
    np.testing.assert_array_equal(run.history_matrix("mean").values[0], np.arange(0, 12, 2))

    # A damaged header (its magic) is skipped by the next magic that starts a whole record.
    _flip(segment, start + HEADER_SIZE + 9)
    kind, start, end = records[8]  # the sampled steps of the fourth flush: step 6
    assert kind == SAMPLES
    _flip(segment, start + 1)
    with pytest.warns(RuntimeWarning, match=r"\(unknown record\).*no step missing"):
        run = open_run(log)
    assert run.step_series().steps.tolist() == list(range(12))
    assert run.sampled_steps() == (0, 2, 4, 8, 10)
    (damage,) = run.damaged
    assert (damage.offset, damage.length, damage.record, damage.steps) == (
        start,
        end - start,
        "unknown",
        range(0),
    )

    # What the reader skipped, `vinlens run show` prints.
    assert main(["run", "show", str(log), "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["damaged"]
    assert shown == {
        "rank": 0,
        "segment": str(segment),
        "offset": start,
        "length": end - start,
        "record": "unknown",
        "steps_missing": [],
    }
    assert main(["run", "show", str(log)]) == 0
    text = capsys.readouterr().out
    assert "damaged records skipped: 1" in text
    assert f"{segment} bytes {start}..{end} (unknown record) fail their checksum" in text


def test_the_end_of_a_closed_segment_is_damage_unless_it_is_a_record_cut_short(
    tmp_path: Path,
) -> None:
    log = tmp_path / "run"
    first = _write(log, range(3))  # steps 0..5
    second = _write(log, range(3, 6))  # a restarted writer of the run: steps 6..11
    assert first != second
    kind, start, end = _records(first)[-1]  # the steps 4 and 5
    assert kind == STEPS
    whole = first.read_bytes()

    _flip(first, end - 3)  # whole, but failing its checksum: damage
    with pytest.warns(RuntimeWarning, match=r"steps 4\.\.5 missing"):
        run = open_run(log)
    assert run.step_series().steps.tolist() == [0, 1, 2, 3, *range(6, 12)]
    assert [(d.segment, d.offset, d.steps) for d in run.damaged] == [
        (str(first), start, range(4, 6))
    ]

    # Cut short, as a writer killed mid-write leaves it: its torn tail, nothing damaged.
    first.write_bytes(whole[: end - 3])
    run = open_run(log)
    assert run.step_series().steps.tolist() == [0, 1, 2, 3, *range(6, 12)]
    assert run.damaged == ()


def _nonfinite_log(log: Path) -> torch.nn.Linear:
    """A log whose step 0 is non-finite (an infinite input), with its replay bundle."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    x = torch.tensor([[float("inf"), 1.0]])
    with TrainingMonitor(model, every=1, on_nonfinite="record", log_dir=log) as monitor:

        def step_fn() -> torch.Tensor:
            model.zero_grad()
            loss = model(x).sum()
            loss.backward()
            return loss

        monitor.run_step(step_fn)
    return model


def test_a_bit_flip_in_a_replay_bundle_is_refused_not_replayed(tmp_path: Path) -> None:
    log = tmp_path / "run"
    model = _nonfinite_log(log)
    run = open_run(log)
    assert run.replay_steps() == (0,)
    assert run.load_replay(0, model=torch.nn.Linear(2, 1)).state_restored
    (bundle,) = (log / "rank-00000").glob("replay-*.pt")
    data = bundle.read_bytes()
    at = data.find(model.weight.detach().numpy().tobytes())
    assert at > 0
    _flip(bundle, at + 2)  # inside the weights: the file still loads as a torch.save file
    with pytest.raises(ValueError, match=rf"{bundle.name}' fails its checksum"):
        run.load_replay(0, model=torch.nn.Linear(2, 1))


def test_an_empty_or_cut_short_bundle_is_refused_naming_the_file(tmp_path: Path) -> None:
    from vinlens.health.monitor.runlog import load_replay

    log = tmp_path / "run"
    _nonfinite_log(log)
    (bundle,) = (log / "rank-00000").glob("replay-*.pt")
    data = bundle.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[:-276])
    with pytest.raises(ValueError, match=rf"{cut.name}' \(\d+ bytes\) is not a whole torch.save"):
        load_replay(cut, torch.nn.Linear(2, 1))
    bundle.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"{bundle.name}' is empty \(0 bytes\)"):
        open_run(log).load_replay(0, model=torch.nn.Linear(2, 1))
