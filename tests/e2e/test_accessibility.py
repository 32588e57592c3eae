"""Accessibility of every widget in JupyterLab, light and dark: axe-core and the keyboard.

The widgets are built as the tour builds them (tests/e2e/host_states.py). axe-core (npm
devDependency) runs on each widget's root with WCAG 2.1 A/AA rules: no serious or critical
violation (contrast, names of buttons and inputs, ARIA use). Then Tab from the widget's first
control must reach every visible, enabled control of the widget, in document order.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from axe import axe_checked_nodes, axe_violations, describe
from nbformat.v4 import new_code_cell, new_notebook

HERE = Path(__file__).resolve().parent
WIDGETS = [
    "config_tree",
    "module_table",
    "snapshot_browser",
    "store_dashboard",
    "coverage_heatmap",
    "attribution_viewer",
    "model_health",
    "store_compare",
    "training_monitor",
    "run_compare",
]
ROOT_CLASS = {
    "config_tree": "vl-config-tree",
    "module_table": "vl-module-table",
    "snapshot_browser": "vl-snapshot-browser",
    "store_dashboard": "vl-sd",
    "coverage_heatmap": "vl-cov",
    "attribution_viewer": "vl-av",
    "model_health": "vl-model-health",
    "store_compare": "vl-sc",
    "training_monitor": "vl-training-monitor",
    "run_compare": "vl-run-compare",
}
COMPOSITE = (
    "[role=tablist], [role=radiogroup], [role=toolbar], [role=menu], [role=menubar], "
    "[role=listbox], [role=grid], [role=treegrid], [role=tree]"
)
CONTROLS = (
    "button, input, select, textarea, a[href], [tabindex]:not([tabindex='-1']), "
    "[contenteditable='true']"
)


@pytest.fixture(scope="module")
def widgets_notebook(lab_server: dict[str, Any]) -> str:
    cells = [
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nimport host_states\n"
        "made = {name: build() for name, build in host_states.builders().items()}\n"
        "sorted(made)"
    ]
    cells += [f"made[{name!r}]" for name in WIDGETS]
    nb = new_notebook(
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        }
    )
    nb.cells = [new_code_cell(src) for src in cells]
    nbformat.write(nb, str(lab_server["root"] / "a11y.ipynb"))
    return "a11y.ipynb"


def _lab_class() -> Any:
    """The e2e conftest's Lab helper (loaded by path: several conftest modules share a name)."""
    spec = importlib.util.spec_from_file_location("vinlens_e2e_conftest", HERE / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Lab


def _root(widget: str) -> str:
    return f".jp-OutputArea-output .vl-root.{ROOT_CLASS[widget]}"


@pytest.fixture(scope="module")
def opened(lab_server: dict[str, Any], browser_ctx: Any, widgets_notebook: str) -> Any:
    page = browser_ctx.new_page()
    # axe checks only what is on screen: a notebook clips its cells to its own scroll box, so
    # the page is tall enough for the tallest widget to be seen whole once scrolled to.
    page.set_viewport_size({"width": 1400, "height": 2400})
    lab = _lab_class()(page, lab_server)
    page.on("pageerror", lambda e: lab.errors.append(str(e)))
    lab.open(widgets_notebook)
    lab.run_all()
    for widget in WIDGETS:
        page.locator(_root(widget)).first.wait_for(state="attached", timeout=180_000)
    # JupyterLab 4.6 puts the shell in a zero-height, overflow-hidden .jp-ThemedContainer
    # (the shell is absolutely positioned, so this changes no layout). axe takes everything
    # inside as clipped and skips it: colour contrast would check nothing.
    page.add_style_tag(
        content=".jp-ThemedContainer:not(.lm-Widget) { overflow: visible !important; }"
    )
    yield lab
    page.close()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_finds_no_serious_violation_in_any_widget(opened, dark):
    opened.set_theme(dark)
    page = opened.page
    page.wait_for_timeout(500)  # canvases redraw on the theme change
    report = []
    for widget in WIDGETS:
        root = page.locator(_root(widget)).first
        root.evaluate("(el) => el.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(200)  # virtual tables draw their rows on the next frame
        bad = axe_violations(page, _root(widget), impacts=("serious", "critical"))
        checked = axe_checked_nodes(page, _root(widget), "color-contrast")
        assert checked >= 10, f"{widget}: axe checked the contrast of only {checked} nodes"
        if bad:
            report.append(f"== {widget} ({'dark' if dark else 'light'})\n{describe(bad)}")
        opened.screenshot(f"a11y-{widget}-{'dark' if dark else 'light'}", root)
    assert not report, "\n".join(report)
    assert opened.errors == [], opened.errors


@pytest.mark.parametrize("widget", WIDGETS)
def test_tab_reaches_every_control(opened, widget):
    page = opened.page
    root = page.locator(_root(widget)).first
    root.scroll_into_view_if_needed()
    found = page.evaluate(
        """([sel, controls, composite]) => {
            const root = document.querySelector(sel);
            const visible = [...root.querySelectorAll(controls)].filter((el) => {
                if (el.disabled || el.closest('[hidden], [inert]')) return false;
                const r = el.getBoundingClientRect();
                const s = getComputedStyle(el);
                return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
            });
            // A roving-tabindex member (tabindex -1 inside a tablist, grid, ...) is reached
            // with the arrow keys once its group has focus; its group needs one Tab stop.
            const roving = visible.filter((el) => el.tabIndex < 0 && el.closest(composite));
            const groups = [...new Set(roving.map((el) => el.closest(composite)))];
            const stopless = groups.filter((g) => ![g, ...g.querySelectorAll('*')].some((el) => el.tabIndex >= 0 && !el.disabled));
            const all = visible.filter((el) => !roving.includes(el));
            all.forEach((el, i) => { el.dataset.vlTab = String(i); });
            const name = (el) => el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : '')
                               + (el.getAttribute('aria-label') ? `[${el.getAttribute('aria-label')}]` : '');
            return { controls: all.map(name), stopless: stopless.map(name) };
        }""",
        [_root(widget), CONTROLS, COMPOSITE],
    )
    controls = found["controls"]
    assert controls, f"{widget}: no controls found"
    assert not found["stopless"], f"{widget}: no Tab stop in {found['stopless']}"
    page.locator(f"{_root(widget)} [data-vl-tab='0']").focus()
    reached = [0]
    for _ in range(len(controls) * 2 + 5):
        page.keyboard.press("Tab")
        at = page.evaluate(
            """(sel) => {
                const a = document.activeElement;
                if (!a || !document.querySelector(sel).contains(a)) return -1;
                return a.dataset.vlTab === undefined ? -2 : Number(a.dataset.vlTab);
            }""",
            _root(widget),
        )
        if at == -1:
            break
        if at >= 0:
            reached.append(at)
    missed = [c for i, c in enumerate(controls) if i not in reached]
    assert not missed, (
        f"{widget}: Tab never reaches {missed} (reached {len(set(reached))} of {len(controls)})"
    )
    assert reached == sorted(reached), f"{widget}: Tab order is not document order: {reached}"
    if os.environ.get("VINLENS_E2E_VERBOSE"):
        print(f"\n[a11y] {widget}: Tab reaches {len(controls)} controls")
