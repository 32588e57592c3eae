"""TrainingMonitorWidget on a run log in a real JupyterLab (issue 28.4).

A training script (``tests/health/runlog_train.py``: a NaN planted at a known step in module
``"1"``) writes a run log in another process. The notebook opens the finished log with a
model and replays the event from its button (the recomputed origin beside the recorded one,
checked in the kernel); then follows a log while the script still writes it (the counters
move while the kernel is idle, the event appears, the end arrives); then opens a run of
1,000 modules by 10,000 sampled steps and checks the page stays responsive (long tasks
measured in the page) and the last module's row can be scrolled to. Light and dark
screenshots of each.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

HEALTH = Path(__file__).resolve().parents[1] / "health"
SCRIPT = HEALTH / "runlog_train.py"

SETUP = f"""import subprocess, sys, time
sys.path.insert(0, {str(HEALTH)!r})
from runlog_train import build_model
from vinlens.health import open_run
from vinlens.widgets import TrainingMonitorWidget
SCRIPT = {str(SCRIPT)!r}
"""

FINISHED = """subprocess.run([sys.executable, SCRIPT, "runs/finished", "--steps", "200",
                "--nan-step", "120", "--every", "5"], check=True, stdout=subprocess.DEVNULL)
view = TrainingMonitorWidget(open_run("runs/finished"), model=build_model(seed=99))
view
"""

GROWING = """proc = subprocess.Popen([sys.executable, SCRIPT, "runs/live", "--steps", "500",
                         "--nan-step", "150", "--every", "5", "--sleep", "0.02"],
                        stdout=subprocess.DEVNULL)
deadline = time.monotonic() + 60
while True:
    try:
        run = open_run("runs/live")
        break
    except FileNotFoundError:
        assert time.monotonic() < deadline, "the script wrote no log"
        time.sleep(0.05)
live = TrainingMonitorWidget(run, interval=0.25)
live
"""

BIG = """import numpy as np
from vinlens.health.monitor.runlog.writer import RunLogWriter
meta = {"module_paths": [f"blocks.{i}.mlp" for i in range(1000)], "fields": ["std", "grad_norm"],
        "every": 1}
writer = RunLogWriter("runs/big", storage_options=None, rank=0, meta=meta)
rng = np.random.default_rng(0)
scale = rng.uniform(0.5, 2.0, (1000, 1))
for step in range(10_000):
    block = np.hstack([scale, scale * (1 + step / 5000)])
    writer.sample(step, block)
    writer.step(step, 1.0 + step / 10_000, 2.0 / (1 + step / 1000))
writer.close()
big = TrainingMonitorWidget(open_run("runs/big"), interval=5)
"""

LONG_TASKS = """() => {
    window.__vlLongTasks = [];
    new PerformanceObserver((list) => {
        for (const e of list.getEntries()) window.__vlLongTasks.push(e.duration);
    }).observe({ type: "longtask" });
}"""


def _shoot(lab: Any, name: str, view: Any) -> None:
    view.scroll_into_view_if_needed()
    for dark in (False, True):
        lab.set_theme(dark)
        lab.screenshot(f"{name}-{'dark' if dark else 'light'}", view)
    lab.set_theme(False)


def test_a_finished_run_log_replays_its_event_from_the_button(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook("run_finished.ipynb", [SETUP, FINISHED])
    lab.open(nb)
    lab.run_cell(0)
    lab.run_cell(1)
    view = page.locator(".vl-training-monitor")
    expect(view.locator(".vl-tm-counters")).to_have_text(
        "step 200 · sampled every 5 · 40 samples shown · 1 non-finite step"
    )
    expect(view.locator(".vl-tm-source")).to_have_text("runs/finished")
    expect(view.locator(".vl-tm-curve")).to_have_count(2)
    grad_curve = view.locator('[data-curve="grad_norm"]')
    expect(grad_curve).to_contain_text("1 non-finite")
    expect(grad_curve.locator(".vl-tm-curve-bad")).to_have_count(1)
    expect(view.locator(".vl-tm-rank-label")).to_be_hidden()  # one rank
    origin = view.locator(".vl-tm-origin-text")
    expect(origin).to_contain_text("Step 120: gradient first non-finite in 1 (call 0)")
    expect(origin).to_contain_text("parameters 1.weight")
    expect(view.locator(".vl-vt-row.vl-tm-origin [data-key=path]")).to_have_text("1")
    recomputed = view.locator(".vl-tm-recomputed")
    expect(recomputed).to_be_hidden()
    button = view.locator(".vl-tm-replay")
    expect(button).to_have_text("Replay")
    button.click()
    expect(recomputed).to_be_visible()
    expect(recomputed).to_contain_text("gradient first non-finite in 1 (call 0)")
    expect(recomputed).to_contain_text("Same module, call and parameters as recorded.")
    expect(recomputed).to_have_class(re.compile(r"vl-tm-agrees"))
    expect(button).to_have_text("Replay again")
    replay = lab.kernel_json("view.replays['0:120']")
    assert replay["agrees"] is True
    assert replay["origin"]["module_path"] == "1"
    assert replay["origin"]["parameter_paths"] == ["1.weight"]
    assert lab.kernel_json("view.error") == ""
    _shoot(lab, "training-monitor-run-replayed", view)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []


def test_a_growing_run_log_is_followed_while_the_kernel_is_idle(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook("run_growing.ipynb", [SETUP, GROWING])
    lab.open(nb)
    lab.run_cell(0)
    lab.run_cell(1)  # returns at once: the script writes in its own process
    view = page.locator(".vl-training-monitor")
    counters = view.locator(".vl-tm-counters")
    step_of = "() => Number((document.querySelector('.vl-tm-counters')?.textContent ?? '')" \
        ".match(/^step ([\\d,]+)/)?.[1]?.replace(/,/g, '') ?? -1)"  # fmt: skip
    page.wait_for_function(f"() => ({step_of})() > 0")
    first = page.evaluate(step_of)
    assert first < 500, first
    # The kernel is idle; the view moves because the widget reads what was appended.
    page.wait_for_function(f"() => ({step_of})() > {first}")
    lab.screenshot("training-monitor-run-growing-light", view)
    expect(counters).to_have_text(re.compile(r"1 non-finite step$"))
    expect(view.locator(".vl-tm-origin-text")).to_contain_text("Step 150: gradient first")
    assert lab.kernel_json("proc.wait(120)") == 0
    expect(counters).to_have_text(
        "step 500 · sampled every 5 · 100 samples shown · 1 non-finite step"
    )
    assert lab.kernel_json("live.history['samples']") == 100
    assert lab.kernel_json("live.series['steps_total']") == 500
    expect(view.locator(".vl-tm-replay")).to_be_hidden()  # no model= given
    _shoot(lab, "training-monitor-run-finished", view)
    lab.kernel_json("live.close() or True")
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []


def test_a_run_of_1000_modules_by_10000_sampled_steps_opens_without_freezing(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook("run_big.ipynb", [SETUP, BIG, "big"])
    lab.open(nb)
    lab.run_cell(0)
    lab.run_cell(1)
    page.evaluate(LONG_TASKS)
    lab.run_cell(2)
    view = page.locator(".vl-training-monitor")
    expect(view.locator(".vl-tm-counters")).to_have_text(
        "step 10,000 · sampled every 1 · 10,000 samples in 262 columns (largest of each)"
        " · no non-finite step"
    )
    widths = page.evaluate(
        "() => Array.from(document.querySelectorAll('.vl-tm-strip')).map(c => c.width)"
    )
    assert widths and set(widths) == {262}
    # The last module is reachable: scroll the table's viewport to its end.
    page.evaluate(
        "() => { const v = document.querySelector('.vl-tm-table .vl-vt-viewport');"
        " v.scrollTop = v.scrollHeight; }"
    )
    expect(view.locator(".vl-vt-row [data-key=path]", has_text="blocks.999.mlp")).to_have_count(1)
    page.wait_for_timeout(500)
    tasks = page.evaluate("() => window.__vlLongTasks")
    print(f"long tasks while opening and scrolling (ms): {sorted(tasks)[-5:]}")
    assert max(tasks, default=0) < 2000, tasks
    _shoot(lab, "training-monitor-run-big", view)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []
