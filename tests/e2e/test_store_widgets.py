"""Store dashboard and coverage heatmap in a real JupyterLab.

The notebook writes a synthetic store whose raw tars hold every snippet, then rewrites the
store without two snippets of one scene (the planted gap), and adds a raw-only scene with
a hostile id. The dashboard must render the store; clicking that scene in the heatmap must
list exactly the two removed snippets; the hostile id must stay text. Screenshots of both
widgets in the light and the dark theme land in artifacts/e2e/.
"""

from __future__ import annotations

from typing import Any

GAP_SCENE = "scene_000005"
REMOVED = ["snippet_000002", "snippet_000004"]
HOSTILE = "<img src=x onerror=window.__pwned=1>"

SETUP = f"""
import io, tarfile
from pathlib import Path
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import (
    SyntheticRawSpec, SyntheticStoreSpec, make_synthetic_samples,
    write_synthetic_raw_dataset, write_synthetic_store,
)
from vinlens.store.writer import VinOfflineStoreWriter

root = Path("store-e2e").absolute()
spec = SyntheticStoreSpec(num_scenes=12, snippets_per_scene=4, outside_snippets_per_scene=0)
full = write_synthetic_store(root / "store", spec, replace=True)
write_synthetic_raw_dataset(
    root / "raw", full, SyntheticRawSpec(missing_snippets_per_scene=0, raw_only_scenes=0)
)
removed = {{({GAP_SCENE!r}, s) for s in {REMOVED!r}}}
with VinOfflineStoreWriter(
    root / "store", num_candidates=spec.num_candidates, scene_labels=True,
    rows_per_shard=spec.rows_per_shard, replace=True,
) as writer:
    previous = None
    for sample in make_synthetic_samples(spec):
        if (sample.scene_id, sample.snippet_id) in removed:
            continue
        blocks = frozenset(sample.zarr_blocks())
        if previous is not None and blocks != previous:
            writer.finish_shard()
        previous = blocks
        writer.add(sample)
with tarfile.open(root / "raw" / "zz-hostile.tar", "w") as tar:
    info = tarfile.TarInfo({HOSTILE!r} + "/snippet_000001.rgb.jpg")
    info.size = 1
    tar.addfile(info, io.BytesIO(b"x"))
config = VinOfflineStoreConfig(store_dir=root / "store", raw_dataset_dir=root / "raw")
"""

DASHBOARD = """
from vinlens.widgets import StoreDashboardWidget
dash = StoreDashboardWidget(config)
dash
"""

COVERAGE = """
from vinlens.widgets import CoverageHeatmapWidget
cov = CoverageHeatmapWidget(config)
cov
"""


def _cell_center(lab: Any, position: int) -> dict[str, float]:
    """Canvas pixel of the heatmap cell at `position` in the current sort order."""
    return lab.page.evaluate(
        """(p) => {
        const c = document.querySelector('.vl-cov canvas');
        const step = Number(c.dataset.step), cols = Number(c.dataset.cols);
        return { x: (p % cols) * step + step / 2, y: Math.floor(p / cols) * step + step / 2 };
    }""",
        position,
    )


def test_store_dashboard_and_coverage_heatmap(lab: Any) -> None:
    lab.write_notebook("store_widgets.ipynb", [SETUP, DASHBOARD, COVERAGE])
    lab.open("store_widgets.ipynb")
    lab.run_all()
    page = lab.page

    # ---- dashboard: rendered from the background acquisition ----
    dash = page.locator(".vl-sd").first
    page.wait_for_selector(".vl-sd .vl-sd-dl", timeout=120_000)
    header = dash.locator(".vl-sd-dl").inner_text()
    samples = lab.kernel_json("dash.stats.num_samples")
    assert f"{samples:,}" in header and "store-e2e/store" in header
    assert lab.kernel_json("dash.request.digest()")[:16] in header
    problems = dash.locator(".vl-sd-problems").inner_text()
    assert "without any valid candidate" in problems and "without candidate IDs" in problems
    assert dash.locator("figure[data-key='rri'] rect.vl-chart-bar").count() == 30
    # Changing the active tab moves no tab label sideways.
    tab_x = (
        "(d) => [...d.querySelectorAll('.vl-sd-tabbtn')].map((b) => b.getBoundingClientRect().x)"
    )
    before = dash.evaluate(tab_x)
    dash.locator(".vl-sd-tabbtn[data-tab='components']").click()
    page.wait_for_selector(".vl-sd .vl-scatter canvas")
    assert dash.evaluate(tab_x) == before
    assert "pairs" in dash.locator(".vl-sd-card").first.inner_text()
    lab.screenshot("store_dashboard-components-light", dash)
    dash.locator(".vl-sd-tabbtn[data-tab='memory']").click()
    memory = dash.locator(".vl-sd-panel").inner_text()
    assert not [line for line in memory.splitlines() if "e-" in line and "iB" in line]
    dash.locator(".vl-sd-tabbtn[data-tab='overview']").click()
    lab.screenshot("store_dashboard-light", dash)

    # ---- coverage: the scene the test removed snippets from lists exactly those ----
    cov = page.locator(".vl-cov").first
    page.wait_for_selector(".vl-cov .vl-cov-totals .vl-cov-total", timeout=120_000)
    # Missing from the store: the two removed snippets plus the hostile raw-only one.
    assert cov.locator(".vl-cov-total").nth(2).inner_text().startswith("3\n")
    sort = cov.locator(".vl-cov-sort")
    sort.select_option("scene_id")
    # Sorted by id, the hostile raw-only scene ('<' sorts first) is cell 0, scene_000001
    # cell 1, ... so the gap scene is cell 5.
    cov.locator("canvas").click(position=_cell_center(lab, 5))
    page.wait_for_selector(".vl-cov-detail .vl-cov-missing li")
    assert cov.locator(".vl-cov-detail-id").inner_text() == GAP_SCENE
    missing = cov.locator(".vl-cov-missing li").all_inner_texts()
    assert missing == REMOVED
    assert cov.locator(".vl-cov-outside").inner_text().endswith("none")
    assert lab.kernel_json("cov.selected_scene") == GAP_SCENE

    # Hover shows the numbers; the hostile scene id is text, never markup.
    cov.locator("canvas").hover(position=_cell_center(lab, 0))
    tooltip = cov.locator(".vl-cov-tooltip")
    assert tooltip.is_visible() and HOSTILE in tooltip.inner_text()
    assert cov.locator("img").count() == 0
    assert page.evaluate("window.__pwned") is None
    cov.locator(".vl-cov-row[data-scene='" + GAP_SCENE + "']").focus()
    lab.screenshot("coverage_heatmap-light", cov)

    # Keyboard: focus the heatmap, move to the hostile scene, Enter lists it.
    cov.locator("canvas").focus()
    page.keyboard.press("Home")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "(h) => document.querySelector('.vl-cov-detail-id')?.textContent === h", arg=HOSTILE
    )
    assert cov.locator(".vl-cov-missing li").all_inner_texts() == ["snippet_000001"]

    lab.set_theme(True)
    page.wait_for_timeout(300)
    lab.screenshot("store_dashboard-dark", dash)
    lab.screenshot("coverage_heatmap-dark", cov)
    lab.set_theme(False)
    assert not [e for e in lab.errors if "vinlens" in e or "vl-" in e], lab.errors
    assert not [w for w in lab.warnings if "Direct export of a 'render'" in w], lab.warnings
