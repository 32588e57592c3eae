"""Newcomer findings in a real JupyterLab: the module table's click rule, "Show in table" on
the NaN banner, the single-model health detail and the snapshot detail of a padded tensor.

One notebook; the test clicks as a new user would, reads the kernel's state back and saves
screenshots (artifacts/e2e/newcomer-*.png) that were looked at when the test was written.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

SETUP = """
from collections import OrderedDict
import torch
from torch import nn
from vinlens.widgets import ModelHealthWidget, ModuleTableWidget, SnapshotBrowserWidget

class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)

class Padded(nn.Module):
    # a conv-like output whose first values in memory are the zero padding
    def forward(self, x):
        return torch.cat([torch.zeros(x.shape[0], 200), x.repeat(1, 100)], dim=1)

torch.manual_seed(0)
model = nn.Sequential(OrderedDict(
    encoder=nn.Linear(4, 8),
    block=nn.Sequential(OrderedDict(act=nn.Tanh(), log=Log())),
    head=nn.Linear(8, 2),
))
padded = nn.Sequential(OrderedDict(pad=Padded(), out=nn.Identity()))
x = torch.randn(16, 4)
"""


def _name_cell(root: Any, name: str) -> Any:
    return root.locator(".vl-mt-name").filter(has_text=re.compile(f"^{re.escape(name)}$"))


def test_newcomer_findings_in_jupyterlab(lab: Any) -> None:
    page = lab.page
    nb = lab.write_notebook(
        "newcomer.ipynb",
        [
            SETUP,
            "table = ModuleTableWidget(model, selected_paths=['encoder', 'block', 'head'])\ntable",
            "health = ModelHealthWidget(model, lambda m: m(x))\nhealth",
            "browser = SnapshotBrowserWidget(padded, lambda: padded(x), module_paths=['pad'])\n"
            "browser",
        ],
    )
    lab.open(nb)
    lab.run_all()
    table = page.locator(".vl-module-table")
    health = page.locator(".vl-model-health")
    browser = page.locator(".vl-snapshot-browser")

    # -- #4: the click rule is written under the totals and followed ---------------------
    expect(table.locator(".vl-mt-click-rule")).to_have_text(
        "Click selects one module · Ctrl/⌘-click adds or removes one · "
        "Shift-click selects a range (Ctrl/⌘+Shift adds it)"
    )
    expect(table.locator(".vl-mt-selected-count")).to_contain_text("3 selected")
    _name_cell(table, "act").click(modifiers=["Control"])
    expect(table.locator(".vl-mt-selected-count")).to_contain_text("4 selected")
    assert lab.kernel_json("table.selected_paths") == ["encoder", "block", "block.act", "head"]
    _name_cell(table, "log").click()
    expect(table.locator(".vl-mt-replaced")).to_have_text("(replaced 4; Ctrl/⌘-click adds)")
    assert lab.kernel_json("table.selected_paths") == ["block.log"]
    _name_cell(table, "head").click(modifiers=["Shift"])
    assert lab.kernel_json("table.selected_paths") == ["block.log", "head"]
    lab.screenshot("newcomer-module-table-click-rule-light", table)

    # -- #5 and #9: Show in table selects the origin and opens its detail ------------------
    expect(health.locator(".vl-mh-origin-box")).to_contain_text(
        "First non-finite value: block.log (call 0)"
    )
    expect(health.locator(".vl-mh-origin-box")).to_contain_text("count only the finite values")
    health.locator(".vl-mh-goto").click()
    expect(health.locator(".vl-mt-selected-count")).to_contain_text("1 selected")
    expect(health.locator(".vl-vt-row.vl-selected .vl-mt-name")).to_have_text("log")
    detail = health.locator(".vl-mh-detail")
    expect(detail).to_contain_text("Output of block.log")
    expect(detail.locator(".vl-mh-facts-head span").nth(1)).to_have_text("output")
    expect(detail).to_contain_text("mean (finite)")
    expect(detail).to_contain_text("finite values")
    expect(health.locator(".vl-vt-hcell[data-key=mh_mean]")).to_contain_text("Mean (finite)")
    assert lab.kernel_json("health.selected_paths") == ["block.log"]
    detail.scroll_into_view_if_needed()
    lab.screenshot("newcomer-model-health-origin-detail-light", health)

    # -- #2: the snapshot detail of a padded tensor --------------------------------------
    browser.scroll_into_view_if_needed()
    browser.locator(".vl-sb-capture").click()
    # the output of `pad` (the first row is its input)
    result_row = browser.locator(".vl-sb-results .vl-vt-row").filter(has_text="output").first
    expect(result_row).to_be_visible()
    result_row.click()
    sb_detail = browser.locator(".vl-sb-whole")
    expect(sb_detail.locator(".vl-sb-whole-title")).to_have_text(
        "Distribution of the whole tensor (all 9,600 values)"
    )
    expect(browser.locator(".vl-sb-prefix-title")).to_have_text(
        "First 32 values in memory order (a prefix, not a random sample)"
    )
    expect(browser.locator(".vl-sb-prefix-hist")).to_have_count(0)
    expect(browser.locator(".vl-sb-whole svg.vl-boxes")).to_have_count(1)
    sb_detail.scroll_into_view_if_needed()
    lab.screenshot("newcomer-snapshot-detail-prefix-light", browser)
    for dark in (True, False):
        lab.set_theme(dark)
    assert [e for e in lab.errors if "vinlens" in e or "vl-" in e] == []
