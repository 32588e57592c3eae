// The camera panels: each camera's image with its heatmap composited on a canvas, the
// colour legend, the map's range in words, and the display toolbar (colormap, opacity,
// scale, side by side or one enlarged) that the browser applies on its own.
import { COLORMAP_NAMES, gradientCss } from "../../lib/colormap";
import { h, replaceChildren } from "../../lib/dom";
import { compositeOverlay, imageSize, imageToRGBA, paintCanvas } from "../../lib/overlay";
import { decode, formatNumber, type NDArray } from "../../lib/payload";
import { MODE_LABELS, colormapOf, displayRange, labelled, mapExplanation, option, rangeText, spanWords } from "./text";
import type { AttributionPayload, Model, Scale, View } from "./types";

interface Panel {
  key: string;
  el: HTMLElement;
  canvas: HTMLCanvasElement;
  detail: HTMLElement;
  note: HTMLElement;
  flatBadge: HTMLElement;
  hatch: HTMLElement;
  range: HTMLElement;
  explain: HTMLElement;
  bar: HTMLElement;
  barMin: HTMLElement;
  barMax: HTMLElement;
  stats: HTMLElement;
  readout: HTMLElement;
  base: Uint8ClampedArray | null;
  width: number;
  height: number;
  pending: boolean;
}

export interface CameraPanels {
  display: HTMLElement;
  grid: HTMLElement;
  empty: HTMLElement;
  records(): Map<string, AttributionPayload>;
  syncPanels(): void;
  syncImages(): void;
  syncAttributions(): void;
  syncDisplay(): void;
  layout(): void;
  paintAll(): void;
  /** Mark the cameras still computing (all when ``keys`` is every camera). */
  setPending(keys: readonly string[]): void;
  dispose(): void;
}

export function cameraPanels(m: Model, hooks: { onRecords(): void }): CameraPanels {
  const cmapSelect = h("select", { class: "vl-input vl-av-colormap", "aria-label": "Colormap" });
  for (const name of COLORMAP_NAMES) cmapSelect.append(option(name, name, false));
  const opacity = h("input", {
    class: "vl-av-opacity", type: "range", min: 0, max: 1, step: 0.05, "aria-label": "Heatmap opacity",
  });
  const opacityText = h("span", { class: "vl-muted vl-av-opacity-value" });
  const scaleSelect = h("select", { class: "vl-input vl-av-scale", "aria-label": "Colour scale" },
    option("normalized", "normalized per camera", false), option("raw", "raw (shared range)", false));
  const viewButton = h("button", { class: "vl-button vl-av-view", type: "button", "aria-pressed": "false" });
  const cameraTabs = h("div", { class: "vl-av-tabs", role: "group", "aria-label": "Enlarged camera" });
  const display = h("div", { class: "vl-toolbar vl-av-display" },
    labelled("colormap", cmapSelect),
    labelled("opacity", h("span", { class: "vl-av-opacity-wrap" }, opacity, opacityText)),
    labelled("scale", scaleSelect), viewButton, cameraTabs);
  const grid = h("div", { class: "vl-av-panels" });
  const empty = h("div", { class: "vl-muted vl-av-empty" }, "No attribution computed yet: choose a layer and press Recompute.");

  const panels = new Map<string, Panel>();
  let records = new Map<string, AttributionPayload>();

  function makePanel(key: string): Panel {
    const canvas = h("canvas", { class: "vl-av-canvas", role: "img", "aria-label": `${key} attribution overlay` });
    const title = h("span", { class: "vl-av-camera" }, key);
    const detail = h("span", { class: "vl-muted vl-av-detail" });
    const note = h("span", { class: "vl-badge vl-av-note", hidden: true });
    const flatBadge = h("span", { class: "vl-badge vl-warn vl-av-flat-badge", hidden: true }, "near-flat");
    const hatch = h("div", { class: "vl-av-hatch", hidden: true, "aria-hidden": "true" });
    const range = h("div", { class: "vl-av-range" });
    const explain = h("div", { class: "vl-muted vl-av-explain-line", hidden: true });
    const barMin = h("span", { class: "vl-av-bar-min vl-mono" });
    const barMax = h("span", { class: "vl-av-bar-max vl-mono" });
    const bar = h("div", { class: "vl-av-bar", "aria-hidden": "true" });
    const stats = h("div", { class: "vl-muted vl-av-stats" });
    const readout = h("div", { class: "vl-mono vl-av-readout", "aria-live": "polite" });
    const download = h("button", { class: "vl-button vl-av-download", type: "button", title: `Download the ${key} overlay as PNG` }, "PNG");
    const panelEl = h("figure", {
      class: "vl-av-panel", tabindex: 0, "data-camera": key,
      "aria-label": `camera ${key}; Enter to enlarge, Escape for all cameras`,
    },
    h("figcaption", { class: "vl-av-caption" },
      h("div", { class: "vl-av-head" }, title, flatBadge, note, download), detail),
    h("div", { class: "vl-av-frame" }, h("div", { class: "vl-av-canvas-wrap" }, canvas, hatch)),
    h("div", { class: "vl-av-legend" }, barMin, bar, barMax),
    range, explain, stats, readout);
    const panel: Panel = {
      key, el: panelEl, canvas, detail, note, flatBadge, hatch, range, explain, bar, barMin, barMax, stats, readout,
      base: null, width: 0, height: 0, pending: false,
    };
    panelEl.addEventListener("keydown", (ev) => onPanelKey(ev, key));
    panelEl.addEventListener("dblclick", () => toggleEnlarge(key));
    canvas.addEventListener("mousemove", (ev) => showValueAt(panel, ev));
    canvas.addEventListener("mouseleave", () => { readout.textContent = ""; });
    download.addEventListener("click", (ev) => { ev.stopPropagation(); downloadPanel(panel); });
    return panel;
  }

  function loadImage(panel: Panel): void {
    const raw = m.get("images")?.[panel.key];
    panel.base = null;
    if (!raw) return;
    const image = decode(raw) as NDArray;
    const { height, width } = imageSize(image);
    panel.width = width;
    panel.height = height;
    panel.base = imageToRGBA(image);
  }

  function paint(panel: Panel): void {
    if (!panel.base) {
      panel.stats.textContent = "no image";
      return;
    }
    const record = records.get(panel.key);
    const cmap = colormapOf(m.get("colormap"));
    if (!record) {
      paintCanvas(panel.canvas, panel.base, panel.width, panel.height);
      panel.detail.textContent = "";
      panel.stats.textContent = "no attribution yet";
      panel.bar.style.background = "";
      panel.barMin.textContent = "";
      panel.barMax.textContent = "";
      panel.range.textContent = "";
      panel.explain.hidden = true;
      markFlat(panel, null);
    } else {
      const { vmin, vmax } = displayRange(m.get("scale"), record, [...records.values()]);
      const rgba = compositeOverlay(panel.base, record.map.data, { colormap: cmap, vmin, vmax, opacity: m.get("opacity") });
      paintCanvas(panel.canvas, rgba, panel.width, panel.height);
      // Two short lines instead of one ellipsised line: method and mode, then the layer.
      const mode = MODE_LABELS[record.capture_mode] ?? record.capture_mode;
      replaceChildren(panel.detail,
        h("span", { class: "vl-av-detail-line" }, `${record.method_label} · ${mode}`),
        h("span", { class: "vl-av-detail-line vl-mono" }, record.layer));
      panel.detail.title = `target ${record.target}; score ${formatNumber(record.score)}`;
      panel.bar.style.background = gradientCss(cmap, 24);
      panel.barMin.textContent = formatNumber(vmin);
      panel.barMax.textContent = formatNumber(vmax);
      panel.barMin.title = panel.barMax.title = m.get("scale") === "normalized"
        ? "colour range: this camera's own raw min and max" : "colour range: shared raw range of all cameras";
      const [lh, lw] = record.layer_shape;
      panel.range.textContent = spanWords(record);
      panel.range.title = rangeText(record);
      // The scale note once, on the first camera that needs it.
      const first = [...records.values()].find((r) => r.method === "grad_cam_plus_plus" && !r.flat);
      const words = mapExplanation(record, first?.camera_key === record.camera_key);
      panel.explain.hidden = words === "";
      panel.explain.textContent = words;
      panel.stats.textContent =
        `raw min ${formatNumber(record.min)} · max ${formatNumber(record.max)} · score ${formatNumber(record.score)} · layer map ${lh}×${lw}`;
      markFlat(panel, record);
    }
    panel.note.hidden = !panel.pending;
    panel.note.textContent = panel.pending ? "computing…" : "";
    panel.el.classList.toggle("vl-av-pending", panel.pending);
  }

  function markFlat(panel: Panel, record: AttributionPayload | null): void {
    const flat = record?.flat === true;
    panel.el.classList.toggle("vl-av-flat", flat);
    panel.flatBadge.hidden = !flat;
    panel.hatch.hidden = !flat;
    panel.flatBadge.title = flat ? `${record!.flat_reason}: the colours of a per-camera normalised map exaggerate it` : "";
    panel.el.setAttribute("aria-label",
      `camera ${panel.key}${flat ? " (near-flat map)" : ""}; Enter to enlarge, Escape for all cameras`);
  }

  function showValueAt(panel: Panel, ev: MouseEvent): void {
    const record = records.get(panel.key);
    const rect = panel.canvas.getBoundingClientRect();
    if (!record || rect.width === 0 || rect.height === 0) return;
    const col = Math.floor(((ev.clientX - rect.left) / rect.width) * panel.width);
    const row = Math.floor(((ev.clientY - rect.top) / rect.height) * panel.height);
    if (row < 0 || col < 0 || row >= panel.height || col >= panel.width) return;
    panel.readout.textContent = `(${row}, ${col}) ${formatNumber(record.map.data[row * panel.width + col])}`;
  }

  function downloadPanel(panel: Panel): void {
    const record = records.get(panel.key);
    const name = `${panel.key}-${record?.method ?? "image"}.png`;
    panel.canvas.toBlob?.((blob) => {
      if (!blob) return;
      const url = URL.createObjectURL(blob);
      const a = h("a", { href: url, download: name, style: "display:none" });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    }, "image/png");
  }

  function paintAll(): void {
    for (const panel of panels.values()) paint(panel);
  }

  function syncPanels(): void {
    const keys = m.get("camera_keys") ?? [];
    for (const key of [...panels.keys()]) if (!keys.includes(key)) panels.delete(key);
    for (const key of keys) {
      if (!panels.has(key)) {
        const panel = makePanel(key);
        panels.set(key, panel);
        loadImage(panel);
      }
    }
    replaceChildren(grid, ...keys.map((k) => panels.get(k)!.el));
    syncTabs();
    layout();
    paintAll();
  }

  function syncImages(): void {
    for (const panel of panels.values()) loadImage(panel);
    paintAll();
  }

  function syncAttributions(): void {
    const raw = decode(m.get("attributions") ?? {}) as Record<string, AttributionPayload>;
    records = new Map(Object.entries(raw));
    empty.hidden = records.size > 0;
    paintAll();
    hooks.onRecords();
  }

  function setPending(keys: readonly string[]): void {
    for (const panel of panels.values()) {
      const pending = keys.includes(panel.key);
      if (panel.pending !== pending) { panel.pending = pending; paint(panel); }
    }
  }

  // -- layout: side by side or one enlarged ----------------------------------------------
  function focused(): string {
    const keys = m.get("camera_keys") ?? [];
    const f = m.get("focused_camera");
    return keys.includes(f) ? f : keys[0] ?? "";
  }

  function layout(): void {
    const single = m.get("view") === "single";
    const f = focused();
    grid.classList.toggle("vl-av-single", single);
    for (const panel of panels.values()) panel.el.hidden = single && panel.key !== f;
    viewButton.textContent = single ? "Show all cameras" : "Enlarge one";
    viewButton.setAttribute("aria-pressed", String(single));
    cameraTabs.hidden = !single;
    for (const b of cameraTabs.querySelectorAll("button")) {
      b.setAttribute("aria-pressed", String(b.dataset.camera === f));
    }
  }

  function syncTabs(): void {
    const keys = m.get("camera_keys") ?? [];
    replaceChildren(cameraTabs, ...keys.map((k) => {
      const b = h("button", { class: "vl-button vl-av-tab", type: "button", "data-camera": k }, k);
      b.addEventListener("click", () => setView("single", k));
      return b;
    }));
  }

  function setView(view: View, camera?: string): void {
    if (camera !== undefined) m.set("focused_camera", camera);
    m.set("view", view);
    m.save_changes();
  }

  function toggleEnlarge(key: string): void {
    if (m.get("view") === "single") setView("grid");
    else setView("single", key);
    panels.get(key)?.el.focus();
  }

  function onPanelKey(ev: KeyboardEvent, key: string): void {
    if (ev.target !== ev.currentTarget) return;
    const keys = m.get("camera_keys") ?? [];
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      toggleEnlarge(key);
    } else if (ev.key === "Escape" && m.get("view") === "single") {
      ev.preventDefault();
      setView("grid");
      panels.get(key)?.el.focus();
    } else if ((ev.key === "ArrowRight" || ev.key === "ArrowLeft") && m.get("view") === "single") {
      ev.preventDefault();
      const i = keys.indexOf(key);
      const next = keys[(i + (ev.key === "ArrowRight" ? 1 : keys.length - 1)) % keys.length];
      setView("single", next);
      panels.get(next)?.el.focus();
    }
  }

  function syncDisplay(): void {
    cmapSelect.value = m.get("colormap");
    opacity.value = String(m.get("opacity"));
    opacityText.textContent = `${Math.round(m.get("opacity") * 100)}%`;
    scaleSelect.value = m.get("scale");
    paintAll();
  }

  const onCmap = (): void => { m.set("colormap", cmapSelect.value); m.save_changes(); };
  const onOpacity = (): void => { m.set("opacity", Number(opacity.value)); m.save_changes(); };
  const onScale = (): void => { m.set("scale", scaleSelect.value as Scale); m.save_changes(); };
  const onView = (): void => setView(m.get("view") === "single" ? "grid" : "single");
  cmapSelect.addEventListener("change", onCmap);
  opacity.addEventListener("input", onOpacity);
  scaleSelect.addEventListener("change", onScale);
  viewButton.addEventListener("click", onView);

  return {
    display, grid, empty,
    records: () => records,
    syncPanels, syncImages, syncAttributions, syncDisplay, layout, paintAll, setPending,
    dispose() {
      cmapSelect.removeEventListener("change", onCmap);
      opacity.removeEventListener("input", onOpacity);
      scaleSelect.removeEventListener("change", onScale);
      viewButton.removeEventListener("click", onView);
    },
  };
}
