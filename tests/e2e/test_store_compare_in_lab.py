"""StoreCompareWidget in a real JupyterLab: the demo store against its shifted second version.

The notebook writes the demo store and ``write_shifted_demo_store`` (RRI rescaled, one
scene dropped, samples added). The shifted field must rank first, its histograms overlay,
the set differences list exactly the changes, the metric choice reorders, the log toggle
redraws, an export downloads CSV, and Cancel leaves the shown comparison in place.
Screenshots in light and dark land in artifacts/e2e/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SETUP = """
from pathlib import Path
from vinlens.demo.data import DEMO_STORE_SPEC, write_shifted_demo_store
from vinlens.store.synthetic import write_synthetic_store

root = Path("compare-e2e").absolute()
a = write_synthetic_store(root / "a", DEMO_STORE_SPEC, replace=True).config.store_dir
b = write_shifted_demo_store(root / "b", replace=True)
"""

WIDGET = """
from vinlens.widgets import StoreCompareWidget
cmp = StoreCompareWidget(a, b, max_samples=None)
cmp
"""


def test_store_compare_widget(lab: Any) -> None:
    lab.write_notebook("store_compare.ipynb", [SETUP, WIDGET])
    lab.open("store_compare.ipynb")
    lab.run_all()
    page = lab.page
    widget = page.locator(".vl-sc").first
    page.wait_for_selector(".vl-sc .vl-sc-summary", timeout=120_000)

    # The drifted field is on top, and its overlay is drawn on the shared bins.
    assert widget.locator(".vl-sc-field-name").inner_text() == "rri"
    first_row = widget.locator(".vl-sc-fields .vl-vt-row").first.inner_text()
    assert first_row.split()[:2] == ["1", "rri"]
    assert widget.locator(".vl-sc-bar-a").count() == 64
    assert widget.locator(".vl-sc-step-b").count() == 1
    top = lab.kernel_json("[f.name for f in cmp.comparison.most_drifted(k=1)]")
    assert top == ["rri"]

    # Set differences: the dropped scene, the added samples.
    scenes_a = widget.locator("[data-list='scenes_only_in_a']").inner_text()
    assert "(1)" in scenes_a and "scene_000003" in scenes_a
    samples_b = widget.locator("[data-list='samples_only_in_b']").inner_text()
    assert "(4)" in samples_b and "scene_000001/added/000" in samples_b
    assert lab.kernel_json("cmp.comparison.samples_only_in_b") == 4
    assert "No integrity problems" in widget.locator(".vl-sc-problems").first.inner_text()
    lab.screenshot("store_compare-light", widget)
    lab.screenshot("store_compare-toolbar", widget.locator(".vl-toolbar").first)

    # Another metric: the engine's ranking for it, shown without a kernel round trip.
    widget.locator(".vl-sc-metric").select_option("ks_statistic")
    page.wait_for_function(
        "() => document.querySelector('.vl-sc-fields h4')?.textContent.includes('KS')"
    )
    assert lab.kernel_json("cmp.metric") == "ks_statistic"
    # Click another field: its overlay replaces the first.
    widget.locator(".vl-sc-fields .vl-vt-row").nth(1).click()
    name = widget.locator(".vl-sc-field-name").inner_text()
    assert name != "" and widget.locator(".vl-sc-bar-a").count() > 0
    before = widget.locator(".vl-sc-overlay").inner_html()
    widget.locator(".vl-sc-logy").check()
    page.wait_for_function(
        "() => document.querySelector('.vl-sc-overlay')?.textContent.includes('log scale')"
    )
    assert widget.locator(".vl-sc-overlay").inner_html() != before
    lab.screenshot("store_compare-field-log", widget)

    # Export: the kernel's CSV of the samples only in B arrives as a download.
    with page.expect_download() as download:
        widget.locator(".vl-sc-export[data-what='samples_only_in_b']").click()
    path = download.value.path()
    lines = Path(path).read_text(encoding="utf-8").split()
    assert lines[0] == "sample_key" and len(lines) == 5

    lab.set_theme(True)
    page.wait_for_timeout(300)
    lab.screenshot("store_compare-dark", widget)
    lab.set_theme(False)

    # Cancel a refresh while it runs; the shown comparison stays.
    lab.kernel_json("cmp.refresh() or 0")
    # Checked and clicked in one page task: a refresh that ends between a visibility check
    # and a Playwright click would hide the button and leave the click waiting.
    clicked = page.evaluate(
        """() => { const b = document.querySelector('.vl-sc .vl-sc-cancel');
                   if (!b || b.hidden || b.offsetParent === null) return false;
                   b.click(); return true; }"""
    )
    if clicked:
        page.wait_for_function(
            "() => document.querySelector('.vl-sc-step')?.textContent.includes('cancelled')"
            " || document.querySelector('.vl-sc-cancel').hidden",
            timeout=60_000,
        )
    assert widget.locator(".vl-sc-field-name").count() == 1
    assert page.evaluate("window.__pwned") is None
    assert widget.locator("img").count() == 0
    assert not [e for e in lab.errors if "vinlens" in e or "vl-" in e], lab.errors
