"""TrainingMonitorWidget following a run log on object storage (issue 28.4, the moto server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from s3_server import S3Server

from vinlens.health import open_run
from vinlens.widgets import TrainingMonitorWidget

HEALTH = Path(__file__).parents[1] / "health"


def test_the_widget_follows_a_run_on_s3_while_it_grows_and_replays_its_event(
    s3_server: S3Server,
) -> None:
    sys.path.insert(0, str(HEALTH))
    try:
        from runlog_train import build_model
    finally:
        sys.path.remove(str(HEALTH))
    url = s3_server.url("runs/widget")
    options = s3_server.storage_options
    process = subprocess.Popen(
        [sys.executable, str(HEALTH / "runlog_train.py"), url, "--steps", "400", "--sleep",
         "0.01", "--nan-step", "150", "--storage-options", json.dumps(options)],
        stdout=subprocess.DEVNULL,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    widget = None
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while widget is None:
            assert time.monotonic() < deadline and process.poll() is None, "no log appeared"
            try:
                run = open_run(url, storage_options=options)
            except FileNotFoundError:
                time.sleep(0.2)
                continue
            widget = TrainingMonitorWidget(run, model=build_model(seed=7), interval=0.2)
        widget.observe(lambda change: seen.append(change["new"]["steps_run"]), names="history")
        assert process.wait(timeout=120) == 0
        while widget.history["steps_run"] != 400:
            assert time.monotonic() < deadline + 60, widget.history["steps_run"]
            time.sleep(0.05)
        # Seen moving while the script wrote (every flush is one more object), then whole.
        assert len({n for n in seen if 0 < n < 400}) >= 1, seen
        assert widget.series["steps_total"] == 400 and widget.history["samples"] == 80
        assert [(e["step"], e["replay"]) for e in widget.events] == [(150, True)]
        entry = widget.replay(150)
        assert entry["agrees"] is True and entry["origin"]["module_path"] == "1"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if widget is not None:
            widget.close()
