"""RunCompareWidget in a real JupyterLab: where two training runs part ways.

The tour's part 14 (the demo network trained twice, the second run's learning rate doubled
after step 60) runs in the kernel; the view must mark step 61 on both curves, name the
optimizer as the cause, highlight ``encoder.0`` and pick it in a linked
``ModuleTableWidget`` from "Go to module"; the field picker recomputes the heatmap in the
kernel. Then a run still being written by a script (``tests/health/runlog_train.py``, its
NaN batch at another step than the finished run's) is followed while the kernel is idle:
identical at first, apart at the planted step once the script gets there. Light and dark
screenshots.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from vinlens.demo.notebooks import TWO_RUNS

HEALTH = Path(__file__).resolve().parents[1] / "health"
SCRIPT = HEALTH / "runlog_train.py"

TRAIN = "import torch\n" + TWO_RUNS

VIEWS = """from vinlens.widgets import ModuleSelection, ModuleTableWidget, RunCompareWidget
picked = ModuleSelection()
compare = RunCompareWidget(base_log, changed_log, selection=picked)
compare
"""

TABLE = "table = ModuleTableWidget(build_model(), selection=picked)\ntable\n"

LIVE = f"""import subprocess, sys, time
from vinlens.health import open_run
from vinlens.widgets import RunCompareWidget
SCRIPT = {str(SCRIPT)!r}
subprocess.run([sys.executable, SCRIPT, "runs/done", "--steps", "300", "--nan-step", "250",
                "--every", "5"], check=True, stdout=subprocess.DEVNULL)
proc = subprocess.Popen([sys.executable, SCRIPT, "runs/growing", "--steps", "300",
                         "--nan-step", "180", "--every", "5", "--sleep", "0.02"],
                        stdout=subprocess.DEVNULL)
deadline = time.monotonic() + 60
while True:
    try:
        growing = open_run("runs/growing")
        if growing.record_counts()[0]:
            break
    except FileNotFoundError:
        pass
    assert time.monotonic() < deadline, "the script wrote no step"
    time.sleep(0.05)
live = RunCompareWidget("runs/done", growing.rank(0), interval=0.25)
live
"""


def _shoot(lab: Any, name: str, view: Any) -> None:
    view.scroll_into_view_if_needed()
    for dark in (False, True):
        lab.set_theme(dark)
        lab.screenshot(f"{name}-{'dark' if dark else 'light'}", view)
    lab.set_theme(False)


def test_two_runs_part_ways_at_the_planted_step_and_the_module_is_picked(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook("run_compare.ipynb", [TRAIN, VIEWS, TABLE])
    lab.open(nb)
    lab.run_cell(0)
    assert "first step 61 | cause optimizer | module encoder.0" in lab.cell_output_text(0)
    lab.run_cell(1)
    lab.run_cell(2)
    view = page.locator(".vl-run-compare")
    verdict = view.locator(".vl-rc-verdict-text")
    expect(verdict).to_contain_text("The runs part ways at step 61; weight_norm of encoder.0")
    expect(verdict).to_contain_text(
        "Likely cause: the gradients agreed but the update did not (optimizer)."
    )
    expect(view.locator(".vl-rc-verdict")).to_have_class(re.compile(r"vl-rc-diverged"))
    expect(view.locator(".vl-rc-run-a")).to_have_text(re.compile(r"^A: .*/base$"))
    expect(view.locator(".vl-rc-curve")).to_have_count(2)
    for curve in ("loss", "grad_norm"):
        chart = view.locator(f'[data-curve="{curve}"]')
        expect(chart.locator("line.vl-rc-first")).to_have_count(1)
        expect(chart.locator("polyline.vl-rc-line-a")).not_to_have_count(0)
        expect(chart.locator("polyline.vl-rc-line-b")).not_to_have_count(0)
    expect(view.locator(".vl-rc-tick-first-divergent")).to_have_text("parts at 61")
    expect(view.locator(".vl-rc-steps")).to_have_text("6 modules · steps 0–99")
    divergent = view.locator(".vl-vt-row.vl-rc-divergent")
    expect(divergent.locator("[data-key=path]")).to_have_text("encoder.0")
    expect(divergent.locator("[data-key=weights]")).to_have_text("61")
    widths = page.evaluate(
        "() => Array.from(document.querySelectorAll('.vl-rc-strip')).map(c => c.width)"
    )
    assert widths and set(widths) == {100}, widths
    # Steps before 61 are equal in every module: their columns are blank.
    blank = page.evaluate(
        """() => Array.from(document.querySelectorAll('.vl-rc-strip')).every(c => {
             const px = c.getContext('2d').getImageData(0, 0, 61, 1).data;
             return px.every((v, i) => i % 4 !== 3 || v === 0); })"""
    )
    assert blank
    _shoot(lab, "run-compare", view)
    view.locator(".vl-rc-goto").click()
    assert lab.kernel_json("picked.paths") == ["encoder.0"]
    assert lab.kernel_json("table.selected_paths") == ["encoder.0"]
    picked_row = page.locator(".vl-module-table .vl-vt-row.vl-selected [data-key=path]")
    expect(picked_row).to_have_attribute("title", "encoder.0")  # the tree shows "0"
    view.locator(".vl-rc-field").select_option("weight_norm")
    expect(view.locator(".vl-rc-steps")).to_have_text("6 modules · steps 0–99")
    assert lab.kernel_json("compare.difference['field']") == "weight_norm"
    assert lab.kernel_json("compare.error") == ""
    lab.kernel_json("compare.close() or True")
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []


def test_a_run_still_being_written_is_compared_as_it_grows(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook("run_compare_live.ipynb", [LIVE])
    lab.open(nb)
    lab.run_cell(0)  # returns at once: the script writes in its own process
    view = page.locator(".vl-run-compare")
    verdict = view.locator(".vl-rc-verdict-text")
    # The kernel is idle; the verdict moves because the widget reads what was appended.
    expect(verdict).to_contain_text("The runs part ways at step 180", timeout=60_000)
    expect(verdict).to_contain_text("Likely cause: the inputs differ.")
    expect(view.locator(".vl-rc-tick-first-divergent")).to_have_text("parts at 180")
    assert lab.kernel_json("proc.wait(120)") == 0
    page.wait_for_function(
        "() => /steps 0–29[0-9]/.test(document.querySelector('.vl-rc-steps')?.textContent ?? '')",
        timeout=30_000,
    )
    assert lab.kernel_json("live.curves['b']['steps_total']") == 300
    _shoot(lab, "run-compare-live", view)
    lab.kernel_json("live.close() or True")
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []
