"""TrainingMonitorWidget in a real JupyterLab: live while the loop runs, pointing at the origin.

The notebook trains a small network whose RMSNorm has its epsilon outside the square root;
at step 120 one sample is all zeros and the backward makes NaN there. The view is displayed
before the loop; the test sees it update while the training cell is still running (its
every-step loss and gradient-norm curves too), then
reads the event's origin, the highlighted row and the low-headroom cell, selects the event
from its mark (checked in the kernel), and saves light and dark screenshots.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

SETUP = "import torch\nfrom torch import nn\n\nfrom vinlens.demo.training import build_model\nfrom vinlens.health import NonFiniteGradientError, TrainingMonitor, precision_headroom\nfrom vinlens.widgets import TrainingMonitorWidget\n\nnet = build_model()  # encoder (Linear, RMSNorm, ReLU), head; seeded\ninputs = torch.randn(200, 8, 16) * 2e4  # raw sensor units\ntargets = torch.randint(0, 4, (200, 8))\ninputs[120, 3] = 0.0  # at step 120 one camera went dark: an all-zero sample\nmonitor = TrainingMonitor(net, every=10)\nview = TrainingMonitorWidget(monitor, precision=precision_headroom(net, lambda: net(inputs[0])))\n"

VIEW = "view"

LOOP = "optimizer = torch.optim.SGD(net.parameters(), lr=0.05)\nloss_fn = nn.CrossEntropyLoss()\nfor step in range(len(inputs)):\n    def train_step():\n        optimizer.zero_grad()\n        loss = loss_fn(net(inputs[step]), targets[step])\n        loss.backward()\n        return loss\n    try:\n        monitor.run_step(train_step)\n    except NonFiniteGradientError as error:\n        print(error)\n        break\n    optimizer.step()\nview.refresh()\n"


def test_training_monitor_updates_live_and_points_at_the_module(lab: Any) -> None:
    page = lab.page
    loop = LOOP.replace("    optimizer.step()\n", "    optimizer.step()\n    time.sleep(0.05)\n")
    nb = lab.write_notebook("training_monitor.ipynb", ["import time\n" + SETUP, VIEW, loop])
    lab.open(nb)
    lab.run_cell(0)
    lab.run_cell(1)
    view = page.locator(".vl-training-monitor")
    counters = view.locator(".vl-tm-counters")
    expect(counters).to_have_text(
        "step 0 · sampled every 10 · 0 samples shown · no non-finite step"
    )
    expect(view.locator(".vl-tm-origin-text")).to_have_text("No non-finite gradient so far.")
    # Start the training cell without waiting for it.
    page.evaluate(
        """() => {
        const w = window.jupyterapp.shell.currentWidget;
        w.content.activeCellIndex = 2;
        window.jupyterapp.commands.execute('notebook:run-cell');
    }"""
    )
    # While the training cell still runs, the view has moved past its first samples.
    page.wait_for_function(
        """() => {
        const w = window.jupyterapp.shell.currentWidget;
        const busy = w.sessionContext.session.kernel.status === 'busy';
        const t = document.querySelector('.vl-tm-counters')?.textContent ?? '';
        const m = t.match(/^step (\\d+)/);
        return busy && m && Number(m[1]) >= 20;
    }"""
    )
    lab.screenshot("training-monitor-running-light", view)
    # A run is read as curves first: the every-step loss and gradient norm, live.
    expect(view.locator(".vl-tm-curve")).to_have_count(2)
    lab.wait_kernel_idle()
    expect(counters).to_contain_text("step 121")
    expect(counters).to_contain_text("1 non-finite step")
    grad_curve = view.locator('[data-curve="grad_norm"]')
    expect(grad_curve).to_contain_text("1 non-finite")  # step 120's NaN gradient norm
    expect(grad_curve.locator(".vl-tm-curve-bad")).to_have_count(1)
    assert lab.kernel_json("view.series['steps_total']") == 121
    origin = view.locator(".vl-tm-origin-text")
    expect(origin).to_contain_text("Step 120: gradient first non-finite in encoder.1 (call 0)")
    origin_row = view.locator(".vl-vt-row.vl-tm-origin")
    expect(origin_row).to_have_count(1)
    expect(origin_row.locator("[data-key=path]")).to_have_text("encoder.1")
    expect(view.locator(".vl-vt-row.vl-tm-reached [data-key=path]")).to_have_text("encoder.0")
    low = view.locator(".vl-vt-cell.vl-tm-low")
    expect(low).to_have_count(1)
    expect(low).to_have_text("0.6")
    low_row = view.locator(".vl-vt-row", has=page.locator(".vl-vt-cell.vl-tm-low"))
    expect(low_row.locator("[data-key=path]")).to_have_text("encoder.0")
    expect(view.locator('[data-key="headroom"] .vl-vt-hlabel')).to_have_text("Headroom (fp16)")
    # The strips are painted: one pixel per sampled step (0, 10, ..., 120).
    widths = page.evaluate(
        "() => Array.from(document.querySelectorAll('.vl-tm-strip')).map(c => c.width)"
    )
    assert widths and set(widths) == {13}
    view.locator(".vl-tm-mark").click()
    page.wait_for_function(
        "() => document.querySelector('.vl-tm-mark')?.classList.contains('vl-tm-mark-selected')"
    )
    assert lab.kernel_json("view.selected_event") == 0
    assert lab.kernel_json("monitor.events[0].origin.module_path") == "encoder.1"
    view.scroll_into_view_if_needed()
    for dark in (False, True):
        lab.set_theme(dark)
        lab.screenshot(f"training-monitor-{'dark' if dark else 'light'}", view)
    lab.set_theme(False)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []
