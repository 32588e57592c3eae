"""Config tree, module table and snapshot browser in a real JupyterLab.

One notebook shows the three widgets for a small model whose module names and config
values are hostile markup. The test clicks rows (click, shift-click, ctrl-click) and reads
``selected_paths`` back from the kernel, captures from the browser and reads the snapshots
back, downloads the CSV, provokes a bad-limits error and a failing ``run``, checks that the
markup stayed text and ran nothing, and saves light and dark screenshots of each widget.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

IMG = "<img src=x onerror=__pwned=1>"
SCRIPT = "<script>__pwned=2</script>"

SETUP = f"""
import torch
from torch import nn
from pydantic import BaseModel
from vinlens.widgets import ConfigTreeWidget, ModuleTableWidget, SnapshotBrowserWidget

class EncoderConfig(BaseModel):
    depth: int = 3
    label: str = {SCRIPT!r}

class VinConfig(BaseModel):
    target_type: str = "vin.models.VinModel"
    name: str = {IMG!r}
    lr: float = 0.0003
    encoder: EncoderConfig = EncoderConfig()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.add_module({IMG!r}, nn.Identity())
        self.add_module({SCRIPT!r}, nn.Identity())

    def forward(self, x):
        return self.head(self.encoder(x))

torch.manual_seed(0)
model = Net()
x = torch.randn(3, 4)

def broken_run():
    model.encoder(x)
    raise RuntimeError("forward exploded on purpose")

def hooks_left(m):
    return sum(len(s._forward_hooks) + len(s._forward_pre_hooks) for s in m.modules())
"""


def _name_cell(root: Any, name: str) -> Any:
    return root.locator(".vl-mt-name").filter(has_text=re.compile(f"^{re.escape(name)}$"))


def test_model_widgets_in_jupyterlab(lab: Any) -> None:
    page = lab.page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    nb = lab.write_notebook(
        "model_widgets.ipynb",
        [
            SETUP,
            "config_tree = ConfigTreeWidget(VinConfig())\nconfig_tree",
            "table = ModuleTableWidget(model)\ntable",
            "browser = SnapshotBrowserWidget(model, lambda: model(x))\nbrowser",
            "failing = SnapshotBrowserWidget(model, broken_run, module_paths=['encoder.0'])\nfailing",
        ],
    )
    lab.open(nb)
    lab.run_all()

    # -- config tree: target type at the root, hostile values as literal text -------------
    tree = page.locator(".vl-config-tree")
    expect(tree.locator(".vl-ct-target-type")).to_have_text("vin.models.VinModel")
    expect(tree.locator(".vl-ct-value", has_text=IMG)).to_be_visible()
    tree.locator(".vl-ct-search").fill("depth")
    expect(tree.locator(".vl-ct-row:not([hidden])")).to_have_count(2)  # encoder + encoder.depth
    tree.locator(".vl-ct-search").fill("")
    expect(tree.locator(".vl-ct-value", has_text=SCRIPT)).to_be_visible()

    # -- module table: click, shift-click, ctrl-click; kernel sees the selection ----------
    table = page.locator(".vl-module-table")
    expect(table.locator(".vl-mt-totals")).to_contain_text("7 modules")
    _name_cell(table, "encoder").click()
    _name_cell(table, "head").click(modifiers=["Shift"])
    expect(table.locator(".vl-vt-row.vl-selected")).to_have_count(4)
    _name_cell(table, IMG).click(modifiers=["Control"])
    expected = ["encoder", "encoder.0", "encoder.1", "head", IMG]
    assert lab.kernel_json("table.selected_paths") == expected
    # and the other way: Python sets the selection, the browser shows it
    lab.kernel_json("setattr(table, 'selected_paths', ['head']) or table.selected_paths")
    expect(table.locator(".vl-vt-row.vl-selected")).to_have_count(1)
    expect(table.locator(".vl-vt-row.vl-selected .vl-mt-name")).to_have_text("head")

    # -- snapshot browser: pick a module, capture, inspect a row, download the CSV ---------
    browser = page.locator(".vl-snapshot-browser").first
    _name_cell(browser, "head").click()
    expect(browser.locator(".vl-sb-selection")).to_have_text("1 module selected")
    browser.locator("input[name=max_samples_per_tensor]").fill("5")
    browser.locator(".vl-sb-capture").click()
    expect(browser.locator(".vl-sb-tensors")).to_have_text("2 / 64")
    kernel = lab.kernel_json(
        "[[s.module_path, s.direction, s.shape, len(s.values)] for s in browser.snapshots]"
    )
    assert kernel == [["head", "input", [3, 8], 5], ["head", "output", [3, 2], 5]]
    assert lab.kernel_json("browser.selected_paths") == ["head"]
    browser.locator(".vl-sb-results .vl-vt-row[data-row='1']").click()
    expect(browser.locator(".vl-sb-value")).to_have_count(5)
    # the distribution drawn is the whole tensor's summary; the values are its first ones
    expect(browser.locator(".vl-sb-whole svg.vl-boxes rect").first).to_be_attached()
    with page.expect_download() as download_info:
        browser.locator(".vl-sb-download").click()
    download = download_info.value
    assert download.suggested_filename == "snapshots.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert [(r["module_path"], r["direction"], r["shape"]) for r in rows] == [
        ("head", "input", "[3,8]"),
        ("head", "output", "[3,2]"),
    ]
    values = lab.kernel_json("[list(s.values) for s in browser.snapshots]")
    for row, sample in zip(rows, values, strict=True):
        assert [float(v) for v in row["values"].strip("[]").split(",")] == sample

    # bad limits: the kernel's error names the field, nothing runs, nothing is hooked
    browser.locator("input[name=max_tensors]").fill("0")
    browser.locator(".vl-sb-capture").click()
    expect(browser.locator(".vl-error")).to_contain_text("max_tensors")
    assert lab.kernel_json("[len(browser.snapshots), hooks_left(model)]") == [2, 0]

    # run() raising: error and traceback in the widget, kernel alive, hooks gone
    failing = page.locator(".vl-snapshot-browser").nth(1)
    failing.locator(".vl-sb-capture").click()
    expect(failing.locator(".vl-error-message")).to_contain_text("forward exploded on purpose")
    expect(failing.locator(".vl-error-traceback")).to_contain_text("broken_run")
    expect(failing.locator(".vl-sb-result-note")).to_contain_text("Partial")
    assert lab.kernel_json(
        "[hooks_left(model), failing.status, [s.module_path for s in failing.snapshots]]"
    ) == [0, "error", ["encoder.0", "encoder.0"]]  # input and output, then the raise

    # -- hostile names stayed text and ran nothing -----------------------------------------
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    expect(_name_cell(table, IMG)).to_be_visible()
    expect(_name_cell(table, SCRIPT)).to_be_visible()
    assert page.locator(".vl-root img, .vl-root script").count() == 0

    # -- screenshots, light and dark ---------------------------------------------------------
    shots = {"config-tree": tree, "module-table": table, "snapshot-browser": browser}
    for dark in (False, True):
        lab.set_theme(dark)
        for name, locator in shots.items():
            locator.scroll_into_view_if_needed()
            lab.screenshot(f"{name}-{'dark' if dark else 'light'}", locator)
    lab.set_theme(False)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []


def test_module_table_in_notebook_7(lab: Any) -> None:
    """Nothing lab-only: the same widget renders and syncs in the Notebook 7 interface."""
    page = lab.page
    nb = lab.write_notebook(
        "nb7_module_table.ipynb",
        [
            "from torch import nn\nfrom vinlens.widgets import ModuleTableWidget\n"
            "table = ModuleTableWidget(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))\n"
            "table",
            "print('SELECTED', table.selected_paths)",
        ],
    )
    page.goto(f"{lab.server['url']}/notebooks/{nb}", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    # Notebook 7 may ask which kernel to start (Lab remembers it, a fresh Notebook does not)
    with contextlib.suppress(PlaywrightTimeout):
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=10_000)
    # Notebook 7 has no window.jupyterapp here: use its menu, as a user would.
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
    table = page.locator(".vl-module-table")
    expect(table.locator(".vl-mt-totals")).to_contain_text("4 modules", timeout=120_000)
    _name_cell(table, "0").click()
    _name_cell(table, "2").click(modifiers=["Shift"])
    expect(table.locator(".vl-vt-row.vl-selected")).to_have_count(3)
    output = page.locator(".jp-Cell").nth(1)
    output.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    expect(output.locator(".jp-OutputArea")).to_contain_text("SELECTED ['0', '1', '2']")
    lab.screenshot("module-table-notebook7-light", table)


HEALTH_SETUP = """
import copy
from collections import OrderedDict
import torch
from torch import nn
from vinlens.widgets import ModelHealthWidget, ModuleSelection, ModuleTableWidget, SnapshotBrowserWidget

class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)

torch.manual_seed(0)
model = nn.Sequential(OrderedDict(
    encoder=nn.Linear(4, 8),
    block=nn.Sequential(OrderedDict(act=nn.Tanh(), log=Log())),
    head=nn.Linear(8, 2),
))
model_b = copy.deepcopy(model)
with torch.no_grad():
    model_b.encoder.weight[0, 0] += 0.5
x = torch.randn(16, 4)
picked = ModuleSelection()
"""


def test_linked_selection_and_health_view_in_jupyterlab(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook(
        "model_health.ipynb",
        [
            HEALTH_SETUP,
            "table = ModuleTableWidget(model, selection=picked)\ntable",
            "health = ModelHealthWidget(model, lambda m: m(x), model_b=model_b, selection=picked)\n"
            "health",
            "browser = SnapshotBrowserWidget(model, lambda: model(x), selection=picked)\nbrowser",
        ],
    )
    lab.open(nb)
    lab.run_all()
    table = page.locator(".vl-module-table")
    health = page.locator(".vl-model-health")
    browser = page.locator(".vl-snapshot-browser")
    # the analysis started at construction: the NaN origin row is highlighted
    expect(health.locator(".vl-mh-origin-box")).to_contain_text(
        "First non-finite value: block.log (call 0): its inputs were finite"
    )
    origin_row = health.locator(".vl-vt-row.vl-mh-origin")
    expect(origin_row).to_have_count(1)
    expect(origin_row.locator(".vl-mt-name")).to_have_text("log")
    expect(origin_row.locator("[data-key=mh_nonfinite]")).not_to_have_text("0")
    expect(health.locator(".vl-mh-mode")).to_contain_text("A vs B · first divergent: encoder")

    # a module picked in the table is picked in the health view and the snapshot browser
    _name_cell(table, "encoder").click()
    expect(health.locator(".vl-vt-row.vl-selected .vl-mt-name")).to_have_text("encoder")
    expect(browser.locator(".vl-sb-selection")).to_have_text("1 module selected")
    expect(health.locator(".vl-mh-detail")).to_contain_text("Output of encoder")
    expect(health.locator(".vl-mh-detail svg.vl-boxes rect.vl-boxes-box")).to_have_count(2)
    assert lab.kernel_json("[picked.paths, health.selected_paths, browser.selected_paths]") == [
        ["encoder"],
        ["encoder"],
        ["encoder"],
    ]
    # and back: a click in the health view moves the table's selection; the head comes
    # after the NaN, so it has no finite value to plot
    _name_cell(health, "head").click()
    expect(table.locator(".vl-vt-row.vl-selected .vl-mt-name")).to_have_text("head")
    expect(health.locator(".vl-mh-detail svg.vl-boxes")).to_contain_text("no finite values")
    assert lab.kernel_json("table.selected_paths") == ["head"]
    health.locator(".vl-mh-detail").scroll_into_view_if_needed()
    lab.screenshot("model-health-detail-nan-light", health)
    _name_cell(health, "encoder").click()

    # Go to the origin; the drift column sorts (largest first)
    health.locator(".vl-mh-goto").click()
    expect(health.locator(".vl-vt-row.vl-vt-cursor.vl-mh-origin")).to_have_count(1)
    # ... which selects it (in every linked widget) and opens its detail
    expect(health.locator(".vl-mh-detail")).to_contain_text("Output of block.log")
    assert lab.kernel_json("picked.paths") == ["block.log"]
    _name_cell(health, "encoder").click()

    # a capture whose run() calls a re-bound model warns instead of reporting ok
    lab.kernel_json(
        "exec('rebound = copy.deepcopy(model)') or setattr(browser, 'run', lambda: rebound(x)) or 1"
    )
    browser.locator(".vl-sb-capture").click()
    expect(browser.locator(".vl-sb-result-note.vl-sb-warning")).to_contain_text(
        "none of the selected modules (encoder) ran"
    )

    for dark in (False, True):
        lab.set_theme(dark)
        health.scroll_into_view_if_needed()
        lab.screenshot(f"model-health-{'dark' if dark else 'light'}", health)
    lab.set_theme(False)
    browser.scroll_into_view_if_needed()
    lab.screenshot("snapshot-browser-warning-light", browser)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []


DEMO_SETUP = """
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
from vinlens.widgets import AttributionViewerWidget, ModelHealthWidget, ModuleSelection, ModuleTableWidget
images = {k: v[0] for k, v in make_camera_images(seed=3).items()}
batch = {k: v[None] for k, v in images.items()}
model = MultiCameraDemoModel()
picked = ModuleSelection()
"""


def test_module_picked_in_the_table_is_the_attribution_layer_and_health_row(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook(
        "linked_selection.ipynb",
        [
            DEMO_SETUP,
            "table = ModuleTableWidget(model, selection=picked)\ntable",
            "health = ModelHealthWidget(model, lambda m: m(batch), selection=picked)\nhealth",
            "viewer = AttributionViewerWidget(model, images, target_class=EVIDENCE_CLASS, "
            "selection=picked, compute=False)\nviewer",
        ],
    )
    lab.open(nb)
    lab.run_all()
    table = page.locator(".vl-module-table")
    health = page.locator(".vl-model-health")
    expect(health.locator(".vl-mh-origin-box")).to_contain_text("No NaN or Inf found")
    table.locator(".vl-mt-view-flat").click()
    table.locator(".vl-mt-search").fill("slam-left.conv2")
    expect(table.locator(".vl-vt-row:not([hidden])")).to_have_count(1)
    _name_cell(table.locator(".vl-vt-row:not([hidden])"), "encoders.slam-left.conv2").click()
    expect(health.locator(".vl-vt-row.vl-selected .vl-mt-name")).to_have_text("conv2")
    expect(health.locator(".vl-mh-detail")).to_contain_text("Output of encoders.slam-left.conv2")
    expect(page.locator(".vl-av-layer")).to_have_value("encoders.{camera}.conv2")
    assert lab.kernel_json("[picked.paths, health.selected_paths, viewer.selected_layer]") == [
        ["encoders.slam-left.conv2"],
        ["encoders.slam-left.conv2"],
        "encoders.{camera}.conv2",
    ]
    health.scroll_into_view_if_needed()
    lab.screenshot("model-health-demo-light", health)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []
