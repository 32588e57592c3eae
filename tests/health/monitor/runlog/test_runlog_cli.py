"""``vinlens run show`` on a finished log and on one still growing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vinlens.cli import main

SCRIPT = Path(__file__).parents[2] / "runlog_train.py"
ENV = os.environ | {"OMP_NUM_THREADS": "1"}


def test_run_show_on_a_finished_log(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "run"
    subprocess.run(
        [sys.executable, str(SCRIPT), str(log), "--steps", "50", "--nan-step", "12"],
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        env=ENV,
    )
    assert main(["run", "show", str(log), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["events"] == [{"step": 12, "rank": 0, "module": "1", "parameters": ["1.weight"]}]
    (rank,) = report["ranks"]
    assert (rank["steps"], rank["sampled_steps"]) == (50, 10)
    assert rank["top_grad_norm"] and all(
        a["max_grad_norm"] >= b["max_grad_norm"]
        for a, b in zip(rank["top_grad_norm"], rank["top_grad_norm"][1:], strict=False)
    )
    assert main(["run", "show", str(log)]) == 0
    text = capsys.readouterr().out
    assert "non-finite events: 1" in text and "1.weight" in text
    assert main(["run", "show", str(tmp_path / "nothing")]) == 2
    assert "is not a vinlens run log" in capsys.readouterr().out


def test_run_show_on_a_growing_log(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(log), "--steps", "600", "--sleep", "0.01"],
        stdout=subprocess.DEVNULL,
        env=ENV,
    )
    counts = []
    try:
        while process.poll() is None and len(counts) < 3:
            time.sleep(2.5)
            code = main(["run", "show", str(log), "--json"])
            out = capsys.readouterr().out
            if code == 0:
                counts.append(json.loads(out)["ranks"][0]["steps"])
    finally:
        process.kill()
        process.wait(timeout=30)
    assert len(counts) >= 2 and counts == sorted(counts) and counts[-1] > counts[0], counts


def _replay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``vinlens run replay`` in a fresh process that imports the script's model."""
    env = ENV | {"PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "vinlens.cli", "run", "replay", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_run_replay_reproduces_the_recorded_origin_in_a_fresh_process(tmp_path: Path) -> None:
    log = tmp_path / "run"
    subprocess.run(
        [sys.executable, str(SCRIPT), str(log), "--steps", "40", "--nan-step", "17"],
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
        env=ENV,
    )
    model = "runlog_train.build_model"
    done = _replay_cli(str(log), "--step", "17", "--model", model, "--arg", "seed=5")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "recorded:   module '1', call 0, parameters 1.weight" in lines
    assert "recomputed: module '1', call 0, parameters 1.weight" in lines
    assert lines[-1] == "the replay reproduces the recorded origin"

    as_json = _replay_cli(str(log), "--step", "17", "--rank", "0", "--model", model, "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["agree"] and report["state_restored"] and report["step"] == 17
    assert report["recorded"] == report["recomputed"]
    assert report["recorded"]["parameters"] == ["1.weight"]

    # A model whose backward no longer makes the NaN (the bundle's weights, another kernel).
    fixed = _replay_cli(str(log), "--step", "17", "--model", model, "--arg", "spike=1e9")
    assert fixed.returncode == 3, fixed.stdout + fixed.stderr
    assert "recomputed: none (the step's gradients stayed finite)" in fixed.stdout
    assert fixed.stdout.splitlines()[-1] == "the NaN does not reproduce"

    no_step = _replay_cli(str(log), "--step", "16", "--model", model)
    assert no_step.returncode == 2
    assert "no replay bundle for step 16 (no non-finite event at that step)" in no_step.stdout
    assert "steps with one: 17" in no_step.stdout
    no_rank = _replay_cli(str(log), "--step", "17", "--rank", "3", "--model", model)
    assert no_rank.returncode == 2 and "has no rank 3; its ranks are 0" in no_rank.stdout
    wrong = _replay_cli(str(log), "--step", "17", "--model", "torch.nn.Linear")
    assert wrong.returncode == 2 and "pass them with --arg" in wrong.stdout
    linear = ("--model", "torch.nn.Linear", "--arg", "in_features=4", "--arg", "out_features=1")
    other = _replay_cli(str(log), "--step", "17", *linear)
    assert other.returncode == 2 and "does not fit the model given" in other.stdout
    missing = _replay_cli(str(tmp_path / "nothing"), "--step", "1", "--model", model)
    assert missing.returncode == 2 and "is not a vinlens run log" in missing.stdout
