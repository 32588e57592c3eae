"""The run log on object storage (the suite's moto S3 server): rotated whole objects."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from s3_server import S3Server, s3_filesystem

from vinlens.health import open_run

SCRIPT = Path(__file__).parents[2] / "runlog_train.py"


def _command(url: str, server: S3Server, *args: str) -> list[str]:
    options = json.dumps(server.storage_options)
    return [sys.executable, str(SCRIPT), url, "--storage-options", options, *args]


def test_a_run_on_s3_opens_while_it_grows_and_after(s3_server: S3Server) -> None:
    url = s3_server.url("runs/live")
    process = subprocess.Popen(
        _command(url, s3_server, "--steps", "500", "--sleep", "0.01"),
        stdout=subprocess.DEVNULL,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    seen = []
    try:
        run = None
        deadline = time.monotonic() + 90
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.7)
            if run is None:
                try:
                    run = open_run(url, storage_options=s3_server.storage_options)
                except FileNotFoundError:
                    continue
            steps = run.refresh().step_series().steps
            np.testing.assert_array_equal(steps, np.arange(len(steps)))
            seen.append(len(steps))
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    assert process.returncode == 0
    assert len({n for n in seen if 0 < n < 500}) >= 2, seen
    run = open_run(url, storage_options=s3_server.storage_options)
    assert run.step_series().steps.tolist() == list(range(500))
    (event,) = run.events
    assert event.step == 37 and event.origin is not None and event.origin.module_path == "1"
    # No append on object storage: every flush is one more whole segment object.
    objects = s3_filesystem(s3_server).ls(f"{s3_server.bucket}/runs/live/rank-00000")
    assert len(objects) >= 3


@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_on_s3_leaves_a_prefix_of_the_whole_run(s3_server: S3Server, seed: int) -> None:
    whole = s3_server.url(f"runs/whole-{seed}")
    subprocess.run(
        _command(whole, s3_server, "--steps", "300", "--every", "3"),
        check=True,
        timeout=120,
        stdout=subprocess.DEVNULL,
    )
    killed = s3_server.url(f"runs/killed-{seed}")
    process = subprocess.Popen(
        _command(killed, s3_server, "--steps", "300", "--every", "3", "--sleep", "0.01"),
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    target = random.Random(seed).randrange(150, 290)
    for line in process.stdout:
        if int(line) >= target:
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    options = s3_server.storage_options
    got = open_run(killed, storage_options=options)
    want = open_run(whole, storage_options=options)
    n = len(got.step_series().steps)
    assert n > 0
    for name in ("steps", "grad_norm", "loss"):
        np.testing.assert_array_equal(
            getattr(got.step_series(), name), getattr(want.step_series(), name)[:n]
        )
    k = len(got.sampled_steps())
    np.testing.assert_array_equal(
        got.history_matrix("std").values, want.history_matrix("std").values[:, :k]
    )
