"""The tour notebook in a real JupyterLab: every widget renders, none shows an error.

Also produces the README's screenshots: with ``VINLENS_UPDATE_DOCS_IMAGES=1`` they are
copied into docs/images/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from vinlens.demo.data import ensure_demo_data
from vinlens.demo.notebooks import TOUR_NOTEBOOK, write_notebooks

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

WIDGETS = {
    "config-tree": ".vl-config-tree",
    "module-table": ".jp-OutputArea-output > .vl-module-table, .jp-OutputArea-output .vl-module-table",
    "snapshot-browser": ".vl-snapshot-browser",
    "store-dashboard": ".vl-sd",
    "coverage-heatmap": ".vl-cov",
    "attribution-viewer": ".vl-av",
    "model-health": ".vl-model-health",
    "store-compare": ".vl-sc",
    "training-monitor": ".vl-training-monitor",
    "run-compare": ".vl-run-compare",
}

# Screenshots of a later widget of a kind, by its index among the tour's widgets of that kind.
LATER_WIDGETS = {
    "model-drift": (".vl-model-health", 1),
    # The dataset part alone: the whole viewer is taller than the browser window.
    "attribution-dataset": (".vl-av-dataset:not([hidden])", 0),
    # Part 13: the run log a script wrote, opened in the training monitor view.
    "training-run": (".vl-training-monitor", 1),
}


def test_tour_renders_every_widget(lab):
    ensure_demo_data(lab.server["demo_dir"])  # made here once so the kernel only reads it
    write_notebooks(lab.server["root"])
    lab.open(TOUR_NOTEBOOK)
    lab.run_all()
    page = lab.page
    for selector in WIDGETS.values():
        page.wait_for_selector(selector, state="attached", timeout=120_000)
    # Background work (store statistics, tar scan) finishes: no progress bar left showing.
    page.wait_for_function(
        """() => [...document.querySelectorAll('.vl-root .vl-progress')]
                  .every(p => p.hidden || p.offsetParent === null)""",
        timeout=120_000,
    )
    visible_errors = page.evaluate(
        """() => [...document.querySelectorAll('.vl-root .vl-error')]
                  .filter(e => !e.hidden && e.offsetParent !== null).map(e => e.innerText)"""
    )
    assert visible_errors == []
    outputs_with_errors = page.evaluate(
        """() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
                  .map(e => e.innerText).filter(t => /Error|Traceback/.test(t))"""
    )
    assert outputs_with_errors == []
    assert page.locator(".vl-av").count() == 3
    assert page.locator(".vl-model-health").count() == 2
    assert page.locator(".vl-training-monitor").count() == 2
    # The dataset pass ran in its cell: the third viewer shows its camera reliance bars.
    page.wait_for_selector(".vl-av >> nth=2 >> .vl-av-dataset:not([hidden])", timeout=120_000)

    shots = {}
    for name, selector in WIDGETS.items():
        widget = page.locator(selector).first
        widget.scroll_into_view_if_needed()
        shots[name] = lab.screenshot(f"tour-{name}", widget)
    for name, (selector, index) in LATER_WIDGETS.items():
        widget = page.locator(selector).nth(index)
        widget.scroll_into_view_if_needed()
        shots[name] = lab.screenshot(f"tour-{name}", widget)
    if os.environ.get("VINLENS_UPDATE_DOCS_IMAGES") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        for name, path in shots.items():
            shutil.copy(path, DOCS_IMAGES / f"{name}.png")
    assert lab.errors == [], lab.errors


def test_tour_opens_clean_and_trusted(lab, monkeypatch):
    """Opened and connected to its kernel, the tour is unmodified and the server trusts it."""
    root = lab.server["root"]
    # Sign into the server's notary database, as `vinlens demo` does into the user's.
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(root.parent / "data"))
    write_notebooks(root, trust=True)
    log = lab.server["log"]
    log_before = log.read_text()
    lab.open(TOUR_NOTEBOOK)
    page = lab.page
    # Lab copies the kernel's spec and language info into the notebook once it connects;
    # give it the moment it takes, then the notebook must still be clean.
    page.wait_for_timeout(2_000)
    dirty = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
    assert dirty is False
    assert page.locator(".jp-mod-dirty").count() == 0
    new_log = log.read_text()[len(log_before) :]
    assert f"Notebook {TOUR_NOTEBOOK} is not trusted" not in new_log, new_log
    assert lab.errors == [], lab.errors
