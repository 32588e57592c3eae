"""TrainingMonitorWidget on a run log (issue 28.4): finished and growing, ranks, replay, bounds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from payload_decode import array, wait_for
from runlog_train import Spike
from torch import nn

from vinlens.health import EVENTS_KEPT, TrainingMonitor, open_run
from vinlens.health.monitor import SUMMARY_FIELDS
from vinlens.health.monitor.runlog.writer import RunLogWriter
from vinlens.widgets import TrainingMonitorWidget
from vinlens.widgets.training_monitor_payload import (
    MAX_HEATMAP_CELLS,
    MAX_SERIES_BUCKETS,
    series_payload,
)

NAN_STEP = 13
FIELDS = [*SUMMARY_FIELDS, "grad_norm"]


def build_model(seed: int = 0, threshold: float = 100.0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), Spike(8, threshold), nn.Tanh(), nn.Linear(8, 1))


def batch(step: int) -> torch.Tensor:
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1000 + step))
    if step == NAN_STEP:
        x[3, 1] = 1e6
    return x


def train(log_dir: Path, steps: int = 30, every: int = 3) -> TrainingMonitor:
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TrainingMonitor(model, every=every, on_nonfinite="record", log_dir=log_dir) as monitor:
        for step in range(steps):
            x = batch(step)

            def step_fn(x: torch.Tensor = x) -> torch.Tensor:
                optimizer.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                return loss

            before = len(monitor.events)
            monitor.run_step(step_fn)
            if len(monitor.events) == before:
                optimizer.step()
    return monitor


def test_a_finished_log_shows_every_sampled_step_the_curves_and_the_events(
    tmp_path: Path,
) -> None:
    monitor = train(tmp_path / "run")
    run = open_run(tmp_path / "run")
    widget = TrainingMonitorWidget(run, interval=0.05)
    history, series = widget.history, widget.series
    assert history["source"] == "run" and history["ranks"] == [0] and history["rank"] == 0
    assert history["paths"] == list(monitor.module_paths)
    assert array(history["steps"]).tolist() == list(range(0, 30, 3))
    np.testing.assert_array_equal(
        array(history["grad_norm"]), monitor.history_matrix("grad_norm").values.astype(np.float32)
    )
    np.testing.assert_array_equal(
        array(history["std"]), monitor.history_matrix("std").values.astype(np.float32)
    )
    assert history["steps_run"] == 30 and history["every"] == 3
    # The every-step curves: one bucket per step here, the NaN step flagged.
    steps = run.step_series()
    assert array(series["steps"]).tolist() == list(range(30))
    np.testing.assert_array_equal(array(series["loss_hi"])[:NAN_STEP], steps.loss[:NAN_STEP])
    assert array(series["grad_norm_bad"]).nonzero()[0].tolist() == [NAN_STEP]
    assert [e["step"] for e in widget.events] == [NAN_STEP]
    assert widget.events[0]["origin"]["module_path"] == "1"
    assert widget.events[0]["replay"] is False  # no model given: no Replay button
    assert widget.history["events_total"] == 1
    assert widget.last_task is None  # following is not an exclusive command
    widget.close()


def test_replay_re_executes_the_event_and_shows_the_recomputed_origin(tmp_path: Path) -> None:
    train(tmp_path / "run")
    run = open_run(tmp_path / "run")
    widget = TrainingMonitorWidget(run, model=build_model(seed=99), interval=0.05)
    assert [e["replay"] for e in widget.events] == [True]
    reply = widget.run_command("replay", {"step": NAN_STEP, "rank": 0})
    assert reply["kind"] == "result", reply
    entry = widget.replays[f"0:{NAN_STEP}"]
    assert entry == reply["data"]
    assert entry["agrees"] is True
    assert entry["origin"]["module_path"] == "1"
    assert entry["origin"]["parameter_paths"] == ["1.weight"]
    # A model whose backward no longer makes the NaN: the replay says it does not agree.
    other = TrainingMonitorWidget(run, model=build_model(threshold=1e9), interval=0.05)
    found = other.replay(NAN_STEP)
    assert found["agrees"] is False and found["origin"] is None
    missing = other.run_command("replay", {"step": 3, "rank": 0})
    assert missing["kind"] == "error" and "no non-finite event at step 3" in missing["message"]
    bad = other.run_command("replay", {"step": "13"})
    assert bad["kind"] == "error" and "integer 'step'" in bad["message"]
    for w in (widget, other):
        w.close()
    plain = TrainingMonitorWidget(run, interval=0.05)
    refused = plain.run_command("replay", {"step": NAN_STEP})
    assert refused["kind"] == "error" and "model=" in refused["message"]
    plain.close()


def test_a_growing_log_is_followed_and_a_quiet_one_is_not_re_sent(tmp_path: Path) -> None:
    paths = [f"layer{i}" for i in range(3)]
    meta = {"module_paths": paths, "fields": FIELDS, "every": 1}
    writer = RunLogWriter(tmp_path / "run", storage_options=None, rank=0, meta=meta)
    rng = np.random.default_rng(0)

    def write(start: int, stop: int) -> None:
        for step in range(start, stop):
            writer.sample(step, rng.uniform(1, 2, (3, len(FIELDS))))
            writer.step(step, 1.0 + step, 0.5)
        writer.flush()

    try:
        write(0, 5)
        widget = TrainingMonitorWidget(open_run(tmp_path / "run"), interval=0.05)
        assert widget.history["samples"] == 5 and widget.series["steps_total"] == 5
        sent: list[int] = []
        widget.observe(lambda change: sent.append(change["new"]["samples"]), names="history")
        write(5, 12)
        wait_for(lambda: widget.history["samples"] == 12)
        assert widget.series["steps_total"] == 12
        assert array(widget.history["steps"]).tolist() == list(range(12))
        time.sleep(0.5)  # ten polls of a log that did not grow
        assert sent == [12]
        writer.event({"step": 11, "rank": 0, "origin": None, "replay": None, "note": None})
        wait_for(lambda: [e["step"] for e in widget.events] == [11])
        assert widget.events[0]["origin"] is None
        again = widget.run_command("follow")
        assert again["kind"] == "error" and "already follows" in again["message"]
        write(12, 14)
        widget.refresh()  # reads the log on this thread, then sends
        assert widget.history["samples"] == 14
        widget.close()
        assert widget._follow is not None and widget._follow.join(5)
    finally:
        writer.close()


def test_the_rank_selector_shows_each_rank_and_the_events_of_all(tmp_path: Path) -> None:
    monitor = train(tmp_path / "run")
    paths = list(monitor.module_paths)
    meta = {"module_paths": paths, "fields": FIELDS, "every": 2, "rank": 1, "world_size": 2}
    meta["run_id"] = open_run(tmp_path / "run").run_id  # rank 1 of the monitor's run
    writer = RunLogWriter(tmp_path / "run", storage_options=None, rank=1, meta=meta)
    for step in range(0, 8, 2):
        writer.sample(step, np.full((len(paths), len(FIELDS)), 7.0))
    for step in range(8):
        writer.step(step, 2.0, 0.25)
    writer.event({"step": 5, "rank": 1, "origin": None, "replay": None, "note": None})
    writer.close()
    widget = TrainingMonitorWidget(open_run(tmp_path / "run"), interval=0.05)
    assert widget.history["ranks"] == [0, 1] and widget.rank == 0
    assert [(e["step"], e["rank"]) for e in widget.events] == [(5, 1), (NAN_STEP, 0)]
    widget.rank = 1  # what the browser's selector sets
    wait_for(lambda: widget.history["rank"] == 1)
    assert array(widget.history["steps"]).tolist() == [0, 2, 4, 6]
    assert (array(widget.history["grad_norm"]) == 7.0).all()
    assert widget.series["steps_total"] == 8 and widget.history["every"] == 2
    assert [(e["step"], e["rank"]) for e in widget.events] == [(5, 1), (NAN_STEP, 0)]
    widget.rank = 5  # not a rank of the run: back to the first
    wait_for(lambda: widget.rank == 0 and widget.history["rank"] == 0)
    widget.close()


def test_one_rank_of_a_run_or_its_directory_is_shown_as_the_run_is(tmp_path: Path) -> None:
    monitor = train(tmp_path / "run")
    paths = list(monitor.module_paths)
    meta = {"module_paths": paths, "fields": FIELDS, "every": 2, "rank": 1, "world_size": 2}
    meta["run_id"] = monitor.run_id  # rank 1 of the monitor's run
    writer = RunLogWriter(tmp_path / "run", storage_options=None, rank=1, meta=meta)
    for step in range(0, 6, 2):
        writer.sample(step, np.full((len(paths), len(FIELDS)), 3.0))
    for step in range(6):
        writer.step(step, 4.0, 0.5)
    writer.close()
    view = open_run(tmp_path / "run").rank(1)
    widget = TrainingMonitorWidget(view, interval=0.05)
    # The view's rank comes first: its curves and heatmaps, with the run's other ranks kept.
    assert widget.rank == 1 and widget.history["rank"] == 1 and widget.run is view.run
    assert widget.history["ranks"] == [0, 1]
    assert array(widget.series["grad_norm_hi"]).tolist() == [4.0] * 6
    assert array(widget.history["steps"]).tolist() == [0, 2, 4]
    widget.close()
    by_path = TrainingMonitorWidget(str(tmp_path / "run"), interval=0.05)
    assert by_path.run is not None and by_path.rank == 0
    assert array(by_path.series["steps"]).tolist() == list(range(30))
    by_path.close()
    with pytest.raises(FileNotFoundError):
        TrainingMonitorWidget(tmp_path / "no-run")
    with pytest.raises(TypeError, match=r"open_run\(log_dir\)\.rank\(r\)"):
        TrainingMonitorWidget(42)


def test_a_run_of_1000_modules_by_10000_sampled_steps_sends_a_bounded_payload(
    tmp_path: Path,
) -> None:
    modules, steps = 1000, 10_000
    fields = ["std", "grad_norm"]
    meta = {"module_paths": [f"m{i}" for i in range(modules)], "fields": fields, "every": 1}
    writer = RunLogWriter(tmp_path / "run", storage_options=None, rank=0, meta=meta)
    block = np.ones((modules, 2))
    for step in range(steps):
        block[:, 1] = 1.0 + (step == 6789) * 1e6  # one spike in the grad norms
        writer.sample(step, block)
        writer.step(step, 1.0, float("nan") if step == 4242 else 0.5)
    writer.close()
    widget = TrainingMonitorWidget(open_run(tmp_path / "run"), interval=3600)
    history, series = widget.history, widget.series
    grad = array(history["grad_norm"])
    assert grad.shape[0] == modules and grad.size <= MAX_HEATMAP_CELLS
    assert history["samples"] == steps and history["step_range"] == [0, steps - 1]
    assert grad.max() == np.float32(1e6 + 1)  # the spike survives the thinning
    assert series["steps_total"] == steps
    assert len(array(series["steps"])) == MAX_SERIES_BUCKETS
    assert array(series["loss_bad"]).sum() == 1
    # Everything the browser gets at once: bounded by the cells, not by the steps.
    state = widget.get_state(["history", "series", "events"])
    size = sum(len(b) for b in _buffers(state))
    assert size <= 2 * MAX_HEATMAP_CELLS * 4 + 6 * MAX_SERIES_BUCKETS * 8 + 8 * 1024
    widget.close()


def _buffers(node: Any) -> list[bytes]:
    if isinstance(node, bytes | memoryview):
        return [bytes(node)]
    if isinstance(node, dict):
        return [b for value in node.values() for b in _buffers(value)]
    if isinstance(node, list | tuple):
        return [b for value in node for b in _buffers(value)]
    return []


def test_the_series_buckets_keep_every_step_and_flag_non_finite_ones() -> None:
    steps = np.arange(25_000)
    norms = np.full(25_000, 2.0)
    norms[17] = 50.0
    norms[24_999] = np.inf
    loss = np.linspace(1, 0, 25_000)
    payload = series_payload(steps, norms, loss)
    firsts = array(payload["steps"])
    assert len(firsts) == MAX_SERIES_BUCKETS and firsts[0] == 0
    assert array(payload["grad_norm_hi"])[0] == 50.0
    assert array(payload["grad_norm_bad"]).nonzero()[0].tolist() == [MAX_SERIES_BUCKETS - 1]
    assert array(payload["grad_norm_hi"])[-1] == 2.0  # the finite values of that bucket
    assert array(payload["loss_lo"])[-1] == pytest.approx(0.0)
    assert array(payload["loss_hi"])[0] == 1.0
    empty = series_payload(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    assert empty["steps_total"] == 0 and len(array(empty["loss_lo"])) == 0


def test_events_past_the_bound_are_counted(tmp_path: Path) -> None:
    paths = ["a"]
    writer = RunLogWriter(
        tmp_path / "run",
        storage_options=None,
        rank=0,
        meta={"module_paths": paths, "fields": FIELDS, "every": 1},
    )
    for step in range(EVENTS_KEPT + 5):
        writer.step(step, float("nan"), float("nan"))
        writer.event({"step": step, "rank": 0, "origin": None, "replay": None, "note": None})
    writer.close()
    widget = TrainingMonitorWidget(open_run(tmp_path / "run"), interval=3600)
    assert len(widget.events) == EVENTS_KEPT
    assert widget.history["events_total"] == EVENTS_KEPT + 5
    assert widget.history["last_nonfinite_step"] == EVENTS_KEPT + 4
    widget.close()
