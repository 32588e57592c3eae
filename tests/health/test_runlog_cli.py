"""``vinlens run show`` on a finished log and on one still growing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vinlens.cli import main

SCRIPT = Path(__file__).with_name("runlog_train.py")
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
