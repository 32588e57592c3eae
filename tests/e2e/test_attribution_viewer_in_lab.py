"""AttributionViewerWidget in a real JupyterLab: the demo three-camera model in every capture
mode, overlay pixels read back from the canvases, recompute with progress and errors,
light and dark screenshots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread

# Where each test plants the bright evidence blob, per camera (row, col); away from the
# centre and the borders so a map that ignored the image could not land there by chance.
EVIDENCE = {"rgb": (24, 70), "slam-left": (60, 18), "slam-right": (16, 44)}
MODES = ("dedicated_layer", "per_camera_call", "stacked_camera_batch")
LAYERS = {
    "dedicated_layer": "encoders.{camera}.conv3",
    "per_camera_call": "encoder.conv3",
    "stacked_camera_batch": "encoder.conv3",
}

SETUP = f"""
import time
from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
from vinlens.widgets.attribution_viewer import AttributionViewerWidget
EVIDENCE = {EVIDENCE!r}
images = {{k: v[0] for k, v in make_camera_images(evidence=EVIDENCE, seed=3).items()}}
"""

# Reads one camera's overlay canvas back from the page and returns the centre of the
# brightest 7x7 window. With opacity 1 the canvas shows only the colormap, and viridis'
# lightness rises monotonically with the value, so the brightest window is the hottest.
HOTTEST = """([widget, camera]) => {
  const root = document.querySelectorAll('.vl-av')[widget];
  const panel = [...root.querySelectorAll('.vl-av-panel')].find(p => p.dataset.camera === camera);
  const canvas = panel.querySelector('canvas');
  const { data, width, height } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
  const lum = new Float64Array(width * height);
  for (let i = 0; i < width * height; i++) {
    lum[i] = 0.2126 * data[4 * i] + 0.7152 * data[4 * i + 1] + 0.0722 * data[4 * i + 2];
  }
  let best = -1, row = -1, col = -1;
  for (let r = 3; r < height - 3; r++) for (let c = 3; c < width - 3; c++) {
    let s = 0;
    for (let dr = -3; dr <= 3; dr++) for (let dc = -3; dc <= 3; dc++) s += lum[(r + dr) * width + c + dc];
    if (s > best) { best = s; row = r; col = c; }
  }
  let min = Infinity, max = -Infinity;
  for (const v of lum) { min = Math.min(min, v); max = Math.max(max, v); }
  return { row, col, width, height, min, max };
}"""


def _wait_for_maps(lab: Any, widgets: int) -> None:
    lab.page.wait_for_function(
        """(n) => {
        const roots = document.querySelectorAll('.vl-av');
        return roots.length === n && [...roots].every(r =>
          [...r.querySelectorAll('.vl-av-stats')].every(s => s.textContent.includes('raw min')));
    }""",
        arg=widgets,
    )


def _set_theme(lab: Any, dark: bool) -> None:
    # Same as conftest's Lab.set_theme, which passes its argument to wait_for_function
    # positionally (Playwright takes it as `arg=` only) and so raises a TypeError.
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    lab.page.evaluate(
        "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme
    )
    lab.page.wait_for_function(
        "(d) => document.body.dataset.jpThemeLight === (d ? 'false' : 'true')", arg=dark
    )


def _set_opacity(lab: Any, widget: int, value: float) -> None:
    slider = lab.page.locator(".vl-av").nth(widget).locator(".vl-av-opacity")
    slider.focus()
    slider.evaluate(
        "(el, v) => { el.value = String(v); el.dispatchEvent(new Event('input', {bubbles: true})); }",
        value,
    )


def test_overlay_hot_region_sits_on_the_planted_evidence_in_every_capture_mode(lab: Any) -> None:
    cells = [SETUP]
    for mode in MODES:
        cells.append(
            f"w_{mode} = AttributionViewerWidget(MultiCameraDemoModel({mode!r}), images, "
            f"target_class=EVIDENCE_CLASS, layer={LAYERS[mode]!r}, capture_mode={mode!r})\n"
            f"w_{mode}"
        )
    lab.open(lab.write_notebook("attribution_modes.ipynb", cells))
    lab.run_all()
    _wait_for_maps(lab, len(MODES))

    for index, mode in enumerate(MODES):
        # The browser writes opacity back to the kernel: the sync is checked, not assumed.
        _set_opacity(lab, index, 1.0)
        assert lab.kernel_json(f"w_{mode}.opacity") == 1.0
        root = lab.page.locator(".vl-av").nth(index)
        assert root.locator(".vl-av-panel").count() == 3
        for camera, (row, col) in EVIDENCE.items():
            hot = lab.page.evaluate(HOTTEST, [index, camera])
            shape = lab.kernel_json(f"list(w_{mode}.maps[{camera!r}].shape)")
            assert [hot["height"], hot["width"]] == shape, (mode, camera, hot)
            assert hot["max"] - hot["min"] > 100, (mode, camera, hot)  # a real heatmap, not flat
            distance = math.hypot(hot["row"] - row, hot["col"] - col)
            assert distance <= 6, f"{mode}/{camera}: hottest at {hot}, evidence at {(row, col)}"
        detail = root.locator(".vl-av-panel").first.locator(".vl-av-detail").inner_text()
        assert "Grad-CAM" in detail and mode.replace("_", " ").split()[0] in detail
    assert not [e for e in lab.errors if "vl-" in e or "attribution" in e.lower()], lab.errors


FLAKY = """
import torch
class FlakyDemoModel(MultiCameraDemoModel):
    # The demo model, plus a switch that makes forward raise and a delay per forward.
    fail = False
    delay = 0.0
    def forward(self, images):
        if self.fail:
            raise RuntimeError("planted failure in forward <img src=x onerror=window.__pwned=1>")
        time.sleep(self.delay)
        return super().forward(images)

model = FlakyDemoModel("dedicated_layer")
w = AttributionViewerWidget(model, images, target_class=EVIDENCE_CLASS,
                            layer="encoders.{camera}.conv3", capture_mode="dedicated_layer")
w
"""


def test_recompute_progress_errors_and_themes(lab: Any, tmp_path: Path) -> None:
    lab.open(lab.write_notebook("attribution_recompute.ipynb", [SETUP, FLAKY]))
    lab.run_all()
    _wait_for_maps(lab, 1)
    root = lab.page.locator(".vl-av").first
    first_map = lab.kernel_json("w.maps['rgb'].round(6).tolist()")

    # Method change from the keyboard-reachable select, Recompute, progress per camera.
    lab.kernel_json("setattr(model, 'delay', 0.5) or 0")
    root.locator(".vl-av-method").select_option("ablation_cam")
    assert root.locator(".vl-av-dirty").is_visible()
    root.locator(".vl-av-recompute").click()
    lab.page.wait_for_function(
        "() => /explaining: [12] \\/ 3 cameras done/"
        ".test(document.querySelector('.vl-av .vl-progress-label').textContent)"
    )
    assert root.locator(".vl-av-cancel").is_visible()
    lab.page.wait_for_function(
        "() => [...document.querySelectorAll('.vl-av .vl-av-detail')]"
        ".every(d => d.textContent.startsWith('Ablation-CAM'))"
    )
    assert lab.kernel_json("[r.method for r in w.records.values()]") == ["ablation_cam"] * 3
    assert lab.kernel_json("w.method") == "ablation_cam"
    assert lab.kernel_json("w.maps['rgb'].round(6).tolist()") != first_map
    assert root.locator(".vl-av-dirty").is_hidden()

    # An exception in the model's forward: an error box with the message as text, the
    # kernel alive, no hook left on any module, the previous maps still shown.
    lab.kernel_json("setattr(model, 'delay', 0.0) or setattr(model, 'fail', True) or 0")
    root.locator(".vl-av-recompute").click()
    error = root.locator(".vl-error")
    error.wait_for(state="visible")
    message = root.locator(".vl-error-message").inner_text()
    assert "planted failure in forward <img src=x onerror=window.__pwned=1>" in message
    assert lab.page.evaluate("() => window.__pwned === undefined")
    assert root.locator(".vl-error img").count() == 0
    hooks = (
        "sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)"
        " for m in model.modules())"
    )
    assert lab.kernel_json(hooks) == 0
    assert lab.kernel_json("w.status") == "error"
    assert root.locator(".vl-av-stats").first.inner_text().startswith("raw min")

    # A layer path that is not in the model, chosen as a hostile page script would.
    lab.kernel_json("setattr(model, 'fail', False) or 0")
    root.locator(".vl-error-dismiss").click()
    root.locator(".vl-av-layer").evaluate(
        "(el) => { const o = document.createElement('option'); o.value = 'encoders.{camera}.nope';"
        " o.textContent = 'nope'; el.append(o); el.value = o.value;"
        " el.dispatchEvent(new Event('change')); }"
    )
    # The kernel refuses a layer that is not one of its choices, and with no capture mode
    # to offer for it there is nothing to recompute.
    error.wait_for(state="visible")
    assert "'encoders.{camera}.nope' is not one of this viewer's layer choices" in (
        root.locator(".vl-error-message").inner_text()
    )
    assert root.locator(".vl-av-recompute").is_disabled()
    assert lab.kernel_json("w.selected_layer") == "encoders.{camera}.conv3"
    root.locator(".vl-error-dismiss").click()

    root.locator(".vl-av-layer").select_option("encoders.{camera}.conv3")
    root.locator(".vl-av-recompute").click()
    lab.page.wait_for_function(
        "() => !document.querySelector('.vl-av .vl-av-recompute').disabled"
        " && document.querySelector('.vl-av .vl-av-dirty').hidden"
    )
    # Enlarge one camera from the keyboard, then back to all cameras.
    panel = root.locator(".vl-av-panel[data-camera='slam-left']")
    panel.focus()
    lab.page.keyboard.press("Enter")
    assert lab.kernel_json("[w.view, w.focused_camera]") == ["single", "slam-left"]
    # the key was the widget's alone: the notebook did not enter edit mode on it
    assert (
        lab.page.evaluate("() => window.jupyterapp.shell.currentWidget.content.mode") == "command"
    )
    assert root.locator(".vl-av-panel:visible").count() == 1
    lab.screenshot("attribution_viewer-enlarged-light", root)
    panel.focus()  # kernel_json ran a cell, which took the focus
    lab.page.keyboard.press("ArrowRight")
    assert lab.kernel_json("w.focused_camera") == "slam-right"
    root.locator(".vl-av-panel[data-camera='slam-right']").focus()
    lab.page.keyboard.press("Escape")
    assert root.locator(".vl-av-panel:visible").count() == 3

    # Hovering reads the raw value under the pointer; PNG downloads the overlay as shown.
    rgb = root.locator(".vl-av-panel[data-camera='rgb']")
    canvas = rgb.locator("canvas")
    box = canvas.bounding_box()
    assert box is not None
    row, col = EVIDENCE["rgb"]
    lab.page.mouse.move(
        box["x"] + (col + 0.5) * box["width"] / 96, box["y"] + (row + 0.5) * box["height"] / 96
    )
    readout = rgb.locator(".vl-av-readout").inner_text()
    value = lab.kernel_json(f"float(w.maps['rgb'][{row}, {col}])")
    assert readout.startswith(f"({row}, {col}) "), readout
    assert float(readout.split(") ")[1]) == pytest.approx(value, rel=1e-3)
    with lab.page.expect_download() as download_info:
        rgb.locator(".vl-av-download").click()
    download = download_info.value
    assert download.suggested_filename == "rgb-ablation_cam.png"
    saved = tmp_path / "rgb.png"
    download.save_as(saved)
    pixels = imread(saved)
    assert pixels.shape[:2] == (96, 96)

    root.scroll_into_view_if_needed()
    lab.screenshot("attribution_viewer-light", root)
    _set_theme(lab, True)
    lab.screenshot("attribution_viewer-dark", root)
    background = root.evaluate("(el) => getComputedStyle(el).backgroundColor")
    _set_theme(lab, False)
    channels = [int(v) for v in background[background.index("(") + 1 : -1].split(",")[:3]]
    assert sum(channels) / 3 < 100, f"dark theme background {background} is not dark"


# The tour's views: blobs in rgb and slam-left, none in slam-right, whose map the demo
# model makes near-flat by design (its CAM channel holds only a constant floor there).
FLAT = """
from vinlens.attribution import near_flat_cameras
views = {k: v[0] for k, v in make_camera_images(
    evidence={'rgb': (30, 62), 'slam-left': (52, 20)}).items()}
wf = AttributionViewerWidget(MultiCameraDemoModel(), views, target_class=EVIDENCE_CLASS,
                             layer="encoders.{camera}.conv3")
wf
"""

# Geometry of each card: the canvas top, the card height, whether a legend label wraps.
GEOMETRY = """(root) => [...root.querySelectorAll('.vl-av-panel')].map(p => {
  const line = (el) => Math.round(el.getBoundingClientRect().height);
  const lh = (el) => parseFloat(getComputedStyle(el).lineHeight) || 14;
  return {
    camera: p.dataset.camera,
    top: Math.round(p.getBoundingClientRect().top),
    canvasTop: Math.round(p.querySelector('canvas').getBoundingClientRect().top),
    height: Math.round(p.getBoundingClientRect().height),
    labelsOneLine: [...p.querySelectorAll('.vl-av-bar-min, .vl-av-bar-max')]
      .every(el => line(el) <= 1.5 * lh(el)),
    hatch: getComputedStyle(p.querySelector('.vl-av-hatch')).display !== 'none',
  };
})"""


def test_near_flat_camera_is_marked_and_cards_align(lab: Any) -> None:
    lab.open(lab.write_notebook("attribution_flat.ipynb", [SETUP, FLAT]))
    lab.run_all()
    _wait_for_maps(lab, 1)
    root = lab.page.locator(".vl-av").first
    assert lab.kernel_json("[k for k, f in wf.flatness.items() if f.flat]") == ["slam-right"]
    # The same verdict as the engine's rule on the records.
    flat_records = "sorted(k for _, k in near_flat_cameras(wf.records.values()))"
    assert lab.kernel_json(flat_records) == ["slam-right"]
    flat = root.locator(".vl-av-panel[data-camera='slam-right']")
    assert flat.locator(".vl-av-flat-badge").is_visible()
    assert flat.locator(".vl-av-hatch").is_visible()
    assert "% of " in flat.locator(".vl-av-range").inner_text()
    for camera in ("rgb", "slam-left"):
        panel = root.locator(f".vl-av-panel[data-camera='{camera}']")
        assert panel.locator(".vl-av-flat-badge").is_hidden()
        assert panel.locator(".vl-av-hatch").is_hidden()
    # The flat camera's colourbar ends are its own raw range, not a pretend 0..max.
    lo, hi = lab.kernel_json("[wf.records['slam-right'].raw_min, wf.records['slam-right'].raw_max]")
    assert float(flat.locator(".vl-av-bar-min").inner_text()) == pytest.approx(lo, rel=1e-3)
    assert float(flat.locator(".vl-av-bar-max").inner_text()) == pytest.approx(hi, rel=1e-3)

    for dark in (False, True):
        _set_theme(lab, dark)
        cards = root.evaluate(GEOMETRY)
        # Cards may wrap onto rows; inside a card the image starts at the same offset, and
        # cards in one row have one height.
        assert len({c["canvasTop"] - c["top"] for c in cards}) == 1, cards
        for row in {c["top"] for c in cards}:
            assert len({c["height"] for c in cards if c["top"] == row}) == 1, cards
        assert all(c["labelsOneLine"] for c in cards), cards
        assert [c["camera"] for c in cards if c["hatch"]] == ["slam-right"]
        root.scroll_into_view_if_needed()
        lab.screenshot(f"attribution_viewer-flat-{'dark' if dark else 'light'}", root)
    _set_theme(lab, False)


MODE_MENU = """
wd = AttributionViewerWidget(MultiCameraDemoModel("dedicated_layer"), images,
                             target_class=EVIDENCE_CLASS, layer="encoders.{camera}.conv3")
wd
"""

# Every layer option with the mode options the menu offers once that layer is chosen.
OFFERED = """(root) => {
  const layer = root.querySelector('.vl-av-layer');
  const mode = root.querySelector('.vl-av-mode');
  const out = {};
  for (const o of [...layer.options]) {
    layer.value = o.value;
    layer.dispatchEvent(new Event('change'));
    out[o.value] = [...mode.options].map(m => m.value);
  }
  return out;
}"""


def test_mode_menu_offers_only_modes_that_work(lab: Any) -> None:
    lab.open(lab.write_notebook("attribution_modes_menu.ipynb", [SETUP, MODE_MENU]))
    lab.run_all()
    _wait_for_maps(lab, 1)
    root = lab.page.locator(".vl-av").first
    offered = root.evaluate(OFFERED)
    # The menu shows exactly the engine's modes for each layer (one probe forward).
    engine = lab.kernel_json("{c['path']: c['modes'] for c in wd.layers if c['modes']}")
    assert offered == engine
    assert offered["encoders.{camera}.conv3"] == ["dedicated_layer"]
    # One camera's own encoder runs once: no per-camera call to offer, so it is no choice.
    assert "encoders.rgb.conv3" not in offered and "head" not in offered
    # Every offered (layer, mode) on the conv layers recomputes without an error.
    for layer in ("encoders.{camera}.conv2", "encoders.{camera}.conv3"):
        root.locator(".vl-av-layer").select_option(layer)
        # One mode: said as text, not a disabled menu of one.
        assert root.locator(".vl-av-mode").is_hidden()
        assert root.locator(".vl-av-mode-text").inner_text() == "dedicated layer"
        root.locator(".vl-av-recompute").click()
        lab.page.wait_for_function(
            "(l) => !document.querySelector('.vl-av .vl-av-recompute').disabled"
            " && document.querySelector('.vl-av .vl-av-dirty').hidden"
            " && [...document.querySelectorAll('.vl-av .vl-av-detail-line.vl-mono')]"
            ".every(d => d.textContent.endsWith('.' + l.split('.').pop()))",
            arg=layer,
        )
        assert root.locator(".vl-error").is_hidden()
        assert lab.kernel_json("[wd.layer, wd.capture_mode, wd.status]") == [
            layer,
            "dedicated_layer",
            "idle",
        ]


DATASET = """
import torch
class CameraDataset(torch.utils.data.Dataset):
    # Even samples carry evidence in every camera, odd ones in rgb only.
    def __len__(self):
        return 12
    def __getitem__(self, i):
        planted = EVIDENCE if i % 2 == 0 else {"rgb": EVIDENCE["rgb"]}
        return {k: v[0] for k, v in make_camera_images(evidence=planted, seed=10 + i).items()}, i % 4
wds = AttributionViewerWidget(MultiCameraDemoModel(), images, target_class=EVIDENCE_CLASS,
                              layer="encoders.{camera}.conv3")
wds.explain_dataset(torch.utils.data.DataLoader(CameraDataset(), batch_size=4), keep_samples=8)
wds
"""

# A digest of one camera canvas's pixels, to tell whether the shown image changed.
CANVAS_SUM = """([camera]) => {
  const panel = [...document.querySelectorAll('.vl-av .vl-av-panel')].find(p => p.dataset.camera === camera);
  const c = panel.querySelector('canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let s = 0;
  for (let i = 0; i < d.length; i += 4) s += d[i] * (1 + (i % 97)) + d[i + 1];
  return s;
}"""


def test_dataset_view_slider_changes_the_shown_sample(lab: Any) -> None:
    lab.open(lab.write_notebook("attribution_dataset.ipynb", [SETUP, DATASET]))
    lab.run_all()
    _wait_for_maps(lab, 1)
    root = lab.page.locator(".vl-av").first
    dataset = root.locator(".vl-av-dataset")
    dataset.wait_for(state="visible")
    assert "12 samples in 3 batches" in root.locator(".vl-av-ds-summary").inner_text()
    assert root.locator(".vl-av-agg").count() == 3
    rows = root.locator(".vl-av-rel-row")
    assert rows.count() == 3
    # rgb holds evidence in every sample: the longest reliance bar.
    widths = root.evaluate(
        "(r) => Object.fromEntries([...r.querySelectorAll('.vl-av-rel-row')].map(row =>"
        " [row.dataset.camera, row.querySelector('.vl-av-rel-fill').getBoundingClientRect().width]))"
    )
    assert max(widths, key=widths.get) == "rgb", widths
    assert root.locator(".vl-av-sample-label").inner_text().startswith("sample 1 / 8")

    before = lab.page.evaluate(CANVAS_SUM, ["rgb"])
    slider = root.locator(".vl-av-sample")
    slider.focus()
    # From the keyboard: the notebook must not take the arrow key for moving between cells.
    lab.page.keyboard.press("ArrowRight")
    lab.page.wait_for_function(
        "() => document.querySelector('.vl-av .vl-av-sample-label').textContent"
        ".startsWith('sample 2 / 8')"
    )
    lab.page.wait_for_function(
        "([b]) => { const p = [...document.querySelectorAll('.vl-av .vl-av-panel')]"
        ".find(p => p.dataset.camera === 'rgb'); const c = p.querySelector('canvas');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let s = 0; for (let i = 0; i < d.length; i += 4) s += d[i] * (1 + (i % 97)) + d[i + 1];"
        " return s !== b; }",
        arg=[before],
    )
    assert lab.kernel_json("wds.sample_index") == 1
    # Sample 1 has evidence in rgb only: both SLAM maps are near-flat and marked so.
    left = root.locator(".vl-av-panel[data-camera='slam-left']")
    lab.page.wait_for_function(
        "() => [...document.querySelectorAll('.vl-av .vl-av-panel')]"
        ".find(p => p.dataset.camera === 'slam-left').classList.contains('vl-av-flat')"
    )
    assert left.locator(".vl-av-flat-badge").is_visible()
    flat = ["slam-left", "slam-right"]
    assert lab.kernel_json("[k for k, f in wds.flatness.items() if f.flat]") == flat
    # Another aggregate statistic from the menu.
    root.locator(".vl-av-stat").select_option("p90")
    assert lab.kernel_json("wds.aggregate_stat") == "p90"
    # One class's maps: labels are i % 4, so class 1 holds samples 1, 5 and 9, and only
    # the first 8 samples are on the slider.
    classes = root.locator(".vl-av-agg-class")
    assert classes.locator("option").all_inner_texts() == [
        "all classes (12)",
        "class 0 (3)",
        "class 1 (3)",
        "class 2 (3)",
        "class 3 (3)",
    ]
    classes.select_option("1")
    assert lab.kernel_json("wds.aggregate_class") == "1"
    rgb = root.locator(".vl-av-agg[data-camera='rgb']")
    most = rgb.locator(".vl-av-conc[data-which='most']")
    assert sorted(
        most.locator(".vl-av-conc-sample").evaluate_all(
            "(es) => es.map(e => Number(e.dataset.sample))"
        )
    ) == [1, 5, 9]
    assert most.locator(".vl-av-conc-gone").inner_text().startswith("#9 ")
    assert "(not kept)" in most.locator(".vl-av-conc-gone").inner_text()
    # A kept entry jumps the slider there and shows that sample.
    shown = lab.page.evaluate(CANVAS_SUM, ["rgb"])
    most.locator("button.vl-av-conc-sample[data-sample='5']").click()
    lab.page.wait_for_function(
        "() => document.querySelector('.vl-av .vl-av-sample-label').textContent"
        ".startsWith('sample 6 / 8')"
    )
    lab.page.wait_for_function("() => document.querySelector('.vl-av .vl-av-sample').value === '5'")
    lab.page.wait_for_function(f"([b]) => ({CANVAS_SUM})(['rgb']) !== b", arg=[shown])
    assert lab.kernel_json("wds.sample_index") == 5
    assert root.locator(".vl-error").is_hidden()
    assert not [e for e in lab.errors if "vl-" in e or "attribution" in e.lower()], lab.errors

    for dark in (False, True):
        _set_theme(lab, dark)
        dataset.scroll_into_view_if_needed()
        lab.screenshot(f"attribution_viewer-dataset-{'dark' if dark else 'light'}", root)
    _set_theme(lab, False)


READING = """
import torch
class RgbOnly(torch.utils.data.Dataset):
    # Evidence in rgb only: both SLAM cameras' maps are near-uniform in every sample.
    def __len__(self):
        return 16
    def __getitem__(self, i):
        planted = {"rgb": EVIDENCE["rgb"]}
        return {k: v[0] for k, v in make_camera_images(evidence=planted, seed=40 + i).items()}, i % 2
wdr = AttributionViewerWidget(MultiCameraDemoModel(), images, target_class=EVIDENCE_CLASS,
                              layer="encoders.{camera}.conv3", method="grad_cam_plus_plus")
wdr.explain_dataset(torch.utils.data.DataLoader(RgbOnly(), batch_size=4), keep_samples=3)
wdr
"""

# Sizes and wrapping of what the dataset view and the cards show, read from the page.
READING_FACTS = """(root) => {
  const box = (e) => e.getBoundingClientRect();
  const lineHeight = (e) => parseFloat(getComputedStyle(e).lineHeight) || 14;
  return {
    aggHeights: [...root.querySelectorAll('.vl-av-agg-canvas')].map(c => box(c).height),
    thumbs: [...root.querySelectorAll('.vl-av-conc-thumb')].map(c => box(c).height),
    notKept: [...root.querySelectorAll('.vl-av-conc-gone-note')].map(n =>
      box(n).height <= lineHeight(n) * 1.5),
    uniform: [...root.querySelectorAll('.vl-av-agg')].map(c =>
      [c.dataset.camera, !!c.querySelector('.vl-av-conc-uniform'),
       c.querySelectorAll('.vl-av-conc-sample').length]),
    relValues: [...root.querySelectorAll('.vl-av-rel-value')].map(v => v.textContent),
    truncated: [...root.querySelectorAll('.vl-av-detail-line, .vl-av-range')]
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent),
    ranges: [...root.querySelectorAll('.vl-av-range')].map(e => e.textContent),
    explain: [...root.querySelectorAll('.vl-av-panel .vl-av-explain-line')]
      .filter(e => !e.hidden).map(e => e.textContent),
    width: box(root.querySelector('.vl-av-aggregates')).width,
  };
}"""


def test_dataset_view_and_cards_read_well(lab: Any) -> None:
    lab.open(lab.write_notebook("attribution_reading.ipynb", [SETUP, READING]))
    lab.run_all()
    _wait_for_maps(lab, 1)
    root = lab.page.locator(".vl-av").first
    root.locator(".vl-av-dataset").wait_for(state="visible")
    facts = root.evaluate(READING_FACTS)
    # Larger maps and readable thumbnails.
    assert facts["aggHeights"] and min(facts["aggHeights"]) >= 180, facts["aggHeights"]
    assert facts["thumbs"] and min(facts["thumbs"]) >= 40, facts["thumbs"]
    # "(not kept)" never breaks mid-phrase.
    assert facts["notKept"] and all(facts["notKept"]), facts["notKept"]
    # The near-uniform SLAM cameras are summarised once, rgb lists its samples.
    uniform = {camera: (summary, count) for camera, summary, count in facts["uniform"]}
    assert uniform["rgb"][0] is False and uniform["rgb"][1] > 0, uniform
    assert uniform["slam-left"] == (True, 0) and uniform["slam-right"] == (True, 0), uniform
    assert "equally concentrated" in root.locator(".vl-av-flat-summary").inner_text()
    # Reliance in one number format: every value has the same number of decimals.
    decimals = {
        v.split(" ")[0].lstrip("+-<>").partition(".")[2].__len__() for v in facts["relValues"]
    }
    assert len(decimals) == 1, facts["relValues"]
    # Cards: nothing cut off, plain wording, a one-line note on Grad-CAM++'s raw scale.
    assert facts["truncated"] == [], facts["truncated"]
    assert not [r for r in facts["ranges"] if "raw span" in r or "'s" in r], facts["ranges"]
    assert any("own scale" in e for e in facts["explain"]), facts["explain"]
    assert root.locator(".vl-av-mode").is_hidden()
    # The view keeps its width when the statistic or the class changes.
    width = facts["width"]
    root.locator(".vl-av-stat").select_option("p90")
    lab.page.wait_for_function("() => document.querySelector('.vl-av .vl-av-stat').value === 'p90'")
    root.locator(".vl-av-agg-class").select_option("1")
    lab.page.wait_for_function(
        "() => document.querySelector('.vl-av .vl-av-agg-class').value === '1'"
    )
    assert root.evaluate(READING_FACTS)["width"] == width
    root.locator(".vl-av-stat").select_option("mean")
    root.locator(".vl-av-agg-class").select_option("all")
    assert root.locator(".vl-error").is_hidden()
    # One Grad-CAM++ note and the flat cameras explained, in the cards.
    explained = [e for e in facts["explain"] if "own scale" in e]
    assert len(explained) == 1, facts["explain"]
    assert sum("shows no location" in e for e in facts["explain"]) >= 1, facts["explain"]
    lab.page.set_viewport_size({"width": 1280, "height": 2400})  # the whole view in one shot
    for dark in (False, True):
        _set_theme(lab, dark)
        root.locator(".vl-av-dataset").scroll_into_view_if_needed()
        name = "dark" if dark else "light"
        lab.screenshot(f"attribution_viewer-reading-dataset-{name}", root.locator(".vl-av-dataset"))
        root.locator(".vl-av-panels").scroll_into_view_if_needed()
        lab.screenshot(f"attribution_viewer-reading-cards-{name}", root.locator(".vl-av-panels"))
    _set_theme(lab, False)
