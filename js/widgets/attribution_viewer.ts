// AttributionViewerWidget front end: one panel per camera with the image and its
// attribution heatmap composited on a canvas, display controls (colormap, opacity,
// normalised or raw scale, side by side or one enlarged) applied locally, and the
// explanation controls (method, layer, capture mode, target class) sent to the kernel as
// an "explain" command that reports progress per camera.
//
// Everything from the kernel is inserted as text (js/lib/dom.ts); images and maps arrive
// as binary arrays ({"$array"} nodes holding DataViews), never as base64 or JSON lists.
import type { AnyModel, RenderProps } from "@anywidget/types";
import "../lib/theme.css";
import "./attribution_viewer.css";
import { COLORMAP_NAMES, gradientCss, type ColormapName } from "../lib/colormap";
import { h, replaceChildren } from "../lib/dom";
import { compositeOverlay, imageSize, imageToRGBA, paintCanvas } from "../lib/overlay";
import { decode, formatNumber, type NDArray } from "../lib/payload";
import { CommandClient, type CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";

export type Scale = "normalized" | "raw";
export type View = "grid" | "single";

export interface LayerChoice {
  path: string;
  type: string;
  /** The capture modes this layer can be read in for every camera (the engine decides). */
  modes: string[];
}

export interface MethodChoice {
  value: string;
  label: string;
}

/** One camera's explanation as the kernel sends it (see attribution_viewer.py:_record_payload). */
export interface AttributionPayload extends MapFlatness {
  camera_key: string;
  method: string;
  method_label: string;
  layer: string;
  capture_mode: string;
  target: string;
  score: number;
  /** Raw attribution values at the camera image's resolution, float32 [H, W]. */
  map: NDArray;
  /** [h, w] of the map at the target layer, before upsampling. */
  layer_shape: number[];
}

/** A map's range and whether it is near-flat beside the other cameras' maps. */
export interface MapFlatness {
  map: NDArray;
  min: number;
  max: number;
  /** max - min (NaN when an end is not finite). */
  span: number;
  /** span / the largest span among the cameras shown (attribution.flatness.map_flatness). */
  relative_span: number;
  largest_camera: string;
  /** Near-flat next to the other cameras or under the absolute floor: normalising it would lie. */
  flat: boolean;
  flat_reason: string;
}

/** One camera's aggregate map over the dataset slice, flatness judged across cameras. */
export type AggregatePayload = MapFlatness;

/** How much the score drops when one camera's input is replaced by the baseline. */
export interface ReliancePayload {
  camera: string;
  /** Mean drop over the slice (score with the camera minus score with the baseline). */
  drop: number;
  /** Standard deviation of the drop over the slice's samples. */
  std: number;
  /** Share of the summed positive drops, in [0, 1] (0 for a camera whose removal helps). */
  share: number;
}

/** A sample the engine kept as one of a camera's most or least concentrated maps. */
export interface ConcentrationPayload {
  /** Position of the sample in the slice, in loader order. */
  sample_id: number;
  /** Share of the map's total in its hottest 10 % of cells. */
  concentration: number;
  /** Where the sample sits on the slider, or null when it was not kept. */
  kept_index: number | null;
  /** The sample's raw map at the layer's resolution. */
  map: NDArray;
}

/** The dataset view's payload (see attribution_viewer.py:_dataset_payload). */
export interface DatasetPayload {
  samples: number;
  batches: number;
  /** Labels of the samples the slider can show, in loader order. */
  kept: string[];
  baseline: string;
  score_label: string;
  method_label: string;
  layer: string;
  stats: MethodChoice[];
  /** stat value -> camera -> aggregate map, over every class. */
  aggregates: Record<string, Record<string, AggregatePayload>>;
  /** "all", then each class the engine reports (value: the class index as a string). */
  classes?: MethodChoice[];
  /** class value -> stat value -> camera -> aggregate map of that class's samples. */
  class_aggregates?: Record<string, Record<string, Record<string, AggregatePayload>>>;
  /** class value ("all" included) -> camera -> the most and least concentrated samples. */
  concentration?: Record<string, Record<string, { most: ConcentrationPayload[]; least: ConcentrationPayload[] }>>;
  reliance: ReliancePayload[];
}

/** Where the dataset pass is (published by the kernel for a run started from Python). */
export interface DatasetTask {
  id?: string;
  state?: "running" | "done" | "failed" | "cancelled";
  done?: number;
  total?: number;
  message?: string;
}

export interface AttributionViewerModel {
  camera_keys: string[];
  images: Record<string, unknown>;
  attributions: Record<string, unknown>;
  methods: MethodChoice[];
  capture_modes: string[];
  layers: LayerChoice[];
  explicit_targets: boolean;
  method: string;
  layer: string;
  /** The layer in the chooser, not yet applied; shared with other widgets' module selection. */
  selected_layer: string;
  capture_mode: string;
  target_class: number | null;
  target_label: string;
  colormap: string;
  opacity: number;
  scale: Scale;
  view: View;
  focused_camera: string;
  dataset: Record<string, unknown>;
  dataset_task: DatasetTask;
  sample_index: number;
  aggregate_stat: string;
  /** "all" or a class index as a string: whose aggregate maps the dataset view shows. */
  aggregate_class: string;
  status: string;
  error: string;
  error_traceback: string;
}

type Model = AnyModel<AttributionViewerModel>;

const MODE_LABELS: Record<string, string> = {
  dedicated_layer: "dedicated layer",
  per_camera_call: "per-camera call",
  stacked_camera_batch: "stacked batch",
};

/** "(targets given in Python)" sits in the layer list under this value. */
export const EXPLICIT_LAYER = "";

/**
 * The capture modes to offer for a layer choice: the engine's modes for a listed layer; the
 * applied mode for the Python targets or a layer set from Python that is not listed; none
 * when no layer is chosen. Only these reach the menu, so a mode the layer cannot satisfy
 * is never offered (and choosing a mode never changes the layer behind the user's back).
 */
export function modesFor(
  layer: string, layers: LayerChoice[], applied: { layer: string; mode: string; explicit: boolean },
): string[] {
  const choice = layers.find((c) => c.path === layer);
  if (choice) return choice.modes;
  if (layer === EXPLICIT_LAYER ? applied.explicit : layer === applied.layer) return [applied.mode];
  return [];
}

/** The raw span of one camera's map next to the largest camera's, for the line under its colourbar. */
export function rangeText(
  record: Pick<AttributionPayload, "camera_key" | "span" | "relative_span" | "largest_camera" | "flat">,
  noun = "raw span",
): string {
  const span = `${noun} ${formatNumber(record.span)}`;
  if (!Number.isFinite(record.relative_span) || record.largest_camera === record.camera_key || !record.largest_camera) {
    return record.flat ? `${span} (near-flat)` : span;
  }
  const pct = 100 * record.relative_span;
  const share = pct >= 10 ? pct.toFixed(0) : pct >= 0.001 ? pct.toPrecision(2) : "<0.001";
  return `${span} = ${share}% of ${record.largest_camera}'s`;
}

/** "sample 4 / 16 · batch 0 #3": the slider position in words (1-based for people). */
export function sampleLabel(dataset: DatasetPayload, index: number): string {
  const n = dataset.kept.length;
  if (n === 0) return "no samples kept";
  const i = Math.min(Math.max(Math.round(index), 0), n - 1);
  return `sample ${i + 1} / ${n} · ${dataset.kept[i]}`;
}

/** The aggregate maps of one class choice ("all": every class) for one statistic. */
export function aggregateMaps(dataset: DatasetPayload, cls: string, stat: string): Record<string, AggregatePayload> {
  const byStat = cls === "all" ? dataset.aggregates : dataset.class_aggregates?.[cls];
  return byStat?.[stat] ?? {};
}

/** "#12 · 0.84": a concentrated sample's id and concentration, "(not kept)" when off the slider. */
export function concentrationText(entry: ConcentrationPayload): string {
  const text = `#${entry.sample_id} · ${entry.concentration.toFixed(2)}`;
  return entry.kept_index === null ? `${text} (not kept)` : text;
}

function finiteRange(data: ArrayLike<number>): { vmin: number; vmax: number } {
  let vmin = Infinity;
  let vmax = -Infinity;
  for (let i = 0; i < data.length; i++) {
    const v = Number(data[i]);
    if (Number.isFinite(v)) { vmin = Math.min(vmin, v); vmax = Math.max(vmax, v); }
  }
  return vmin <= vmax ? { vmin, vmax } : { vmin: 0, vmax: 0 };
}

function sharedRange(maps: AggregatePayload[]): { vmin: number; vmax: number } {
  const lo = Math.min(0, ...maps.map((a) => a.min).filter(Number.isFinite));
  const hi = Math.max(...maps.map((a) => a.max).filter(Number.isFinite), lo);
  return { vmin: lo, vmax: hi };
}

function isColormap(name: string): name is ColormapName {
  return (COLORMAP_NAMES as readonly string[]).includes(name);
}

/** Colour-scale range of one camera: its own min/max, or the shared range of all cameras. */
export function displayRange(
  scale: Scale, record: AttributionPayload, all: AttributionPayload[],
): { vmin: number; vmax: number } {
  if (scale === "normalized") return { vmin: record.min, vmax: record.max };
  let vmin = Math.min(0, ...all.map((r) => r.min));
  let vmax = Math.max(...all.map((r) => r.max));
  if (!Number.isFinite(vmin)) vmin = 0;
  if (!Number.isFinite(vmax)) vmax = vmin;
  return { vmin, vmax };
}

interface Panel {
  key: string;
  el: HTMLElement;
  canvas: HTMLCanvasElement;
  title: HTMLElement;
  detail: HTMLElement;
  note: HTMLElement;
  flatBadge: HTMLElement;
  hatch: HTMLElement;
  range: HTMLElement;
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

function option(value: string, label: string, selected: boolean): HTMLOptionElement {
  const o = h("option", { value }, label);
  o.selected = selected;
  return o;
}

function labelled(text: string, control: HTMLElement): HTMLLabelElement {
  return h("label", { class: "vl-av-field" }, h("span", { class: "vl-muted" }, text), control);
}

function render({ model, el }: RenderProps<AttributionViewerModel>): () => void {
  const m = model as Model;
  const client = new CommandClient(m);
  const status = statusView(m);
  let running: (Promise<unknown> & { id: string }) | null = null;

  // -- explanation controls (drafts until Recompute) -------------------------------------
  const methodSelect = h("select", { class: "vl-input vl-av-method", "aria-label": "Attribution method" });
  const modeSelect = h("select", { class: "vl-input vl-av-mode", "aria-label": "Capture mode" });
  const layerSelect = h("select", { class: "vl-input vl-av-layer", "aria-label": "Target layer" });
  const classInput = h("input", {
    class: "vl-input vl-av-class", type: "number", min: 0, step: 1, "aria-label": "Target class index",
  });
  const targetText = h("span", { class: "vl-av-target vl-mono" });
  const targetName = h("span", { class: "vl-muted" }, "class");
  const recompute = h("button", { class: "vl-button vl-primary vl-av-recompute", type: "button" }, "Recompute");
  const cancel = h("button", { class: "vl-button vl-av-cancel", type: "button", hidden: true }, "Cancel");
  const dirty = h("span", { class: "vl-badge vl-warn vl-av-dirty", hidden: true }, "changes not applied");

  // -- display controls (traitlets, applied in the browser) ------------------------------
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

  const grid = h("div", { class: "vl-av-panels" });
  const empty = h("div", { class: "vl-muted vl-av-empty" }, "No attribution computed yet: choose a layer and press Recompute.");

  // -- dataset view ----------------------------------------------------------------------
  const dsSummary = h("span", { class: "vl-muted vl-av-ds-summary" });
  const dsProgress = h("span", { class: "vl-muted vl-av-ds-progress" });
  const dsCancel = h("button", { class: "vl-button vl-av-ds-cancel", type: "button", hidden: true }, "Cancel");
  const sampleSlider = h("input", {
    class: "vl-av-sample", type: "range", min: 0, max: 0, step: 1, value: 0, "aria-label": "Sample shown above",
  });
  const sampleText = h("span", { class: "vl-mono vl-av-sample-label" });
  const statSelect = h("select", { class: "vl-input vl-av-stat", "aria-label": "Aggregate statistic" });
  const classSelect = h("select", { class: "vl-input vl-av-agg-class", "aria-label": "Class of the aggregate maps" });
  const aggregates = h("div", { class: "vl-av-aggregates" });
  const reliance = h("div", { class: "vl-av-reliance", role: "list", "aria-label": "Camera reliance" });
  const relianceNote = h("div", { class: "vl-muted vl-av-reliance-note" });
  const datasetEl = h("section", { class: "vl-av-dataset", hidden: true, "aria-label": "Dataset view" },
    h("div", { class: "vl-toolbar vl-av-ds-head" },
      h("span", { class: "vl-title" }, "Dataset"), dsSummary, dsProgress, dsCancel),
    h("div", { class: "vl-toolbar vl-av-ds-controls" },
      labelled("sample", h("span", { class: "vl-av-sample-wrap" }, sampleSlider, sampleText)),
      labelled("aggregate", statSelect), labelled("samples of", classSelect)),
    h("div", { class: "vl-av-ds-body" },
      h("div", { class: "vl-av-ds-block" }, h("div", { class: "vl-av-ds-heading" }, "Aggregate maps"), aggregates),
      h("div", { class: "vl-av-ds-block" },
        h("div", { class: "vl-av-ds-heading" }, "Camera reliance"), reliance, relianceNote)),
  );

  const root = h(
    // Keys pressed inside the widget are ours: JupyterLab's notebook shortcuts (Enter to
    // edit, arrows to move between cells) must not act on them.
    "div", { class: "vl-root vl-av", "data-lm-suppress-shortcuts": "true" },
    h("div", { class: "vl-toolbar vl-av-explain" },
      h("span", { class: "vl-title" }, "Attribution"),
      labelled("method", methodSelect), labelled("layer", layerSelect), labelled("mode", modeSelect),
      h("label", { class: "vl-av-field" }, targetName, h("span", { class: "vl-av-target-wrap" }, classInput, targetText)),
      recompute, cancel, dirty),
    h("div", { class: "vl-toolbar vl-av-display" },
      labelled("colormap", cmapSelect),
      labelled("opacity", h("span", { class: "vl-av-opacity-wrap" }, opacity, opacityText)),
      labelled("scale", scaleSelect), viewButton, cameraTabs),
    status.el, empty, grid, datasetEl,
  );
  el.append(root);
  // The notebook's own keydown handler (bubble phase, outside the shortcut system that
  // data-lm-suppress-shortcuts covers) takes arrow keys for moving between cells and
  // cancels their default, so a focused slider or number field would not move. Keys
  // typed into the widget's form controls stop here.
  const keepKeys = (ev: KeyboardEvent): void => {
    const target = ev.target as HTMLElement | null;
    if (target && ["INPUT", "SELECT", "TEXTAREA"].includes(target.tagName)) ev.stopPropagation();
  };
  root.addEventListener("keydown", keepKeys);

  const panels = new Map<string, Panel>();
  let records = new Map<string, AttributionPayload>();
  let pendingCameras = new Set<string>();

  // -- state from the kernel -----------------------------------------------------------
  function syncMethods(): void {
    const current = methodSelect.value || m.get("method");
    replaceChildren(methodSelect, ...m.get("methods").map((c) => option(c.value, c.label, c.value === current)));
  }

  let offeredModes: string[] = [];

  function usableLayers(): LayerChoice[] {
    return (m.get("layers") ?? []).filter((c) => c.modes.length > 0);
  }

  function syncModes(): void {
    const modes = modesFor(layerSelect.value, usableLayers(), {
      layer: m.get("layer"), mode: m.get("capture_mode"), explicit: m.get("explicit_targets"),
    });
    let current = modeSelect.dataset.draft ?? m.get("capture_mode");
    if (!modes.includes(current)) current = modes[0] ?? "";
    if (modes.length === 0) {
      replaceChildren(modeSelect, option("", "(choose a layer first)", true));
    } else {
      replaceChildren(modeSelect, ...modes.map((mode) => option(mode, MODE_LABELS[mode] ?? mode, mode === current)));
    }
    modeSelect.value = current;
    modeSelect.disabled = modes.length < 2;
    offeredModes = modes;
    recompute.disabled = running !== null || modes.length === 0;
    recompute.title = modes.length === 0 ? "choose a layer first" : "";
    modeSelect.title = modes.length === 0 ? ""
      : `capture modes this layer can be read in: ${modes.map((x) => MODE_LABELS[x] ?? x).join(", ")}`;
  }

  function syncLayers(): void {
    const choices = usableLayers();
    const explicit = m.get("explicit_targets");
    const paths = choices.map((c) => c.path);
    let current = m.get("selected_layer") ?? m.get("layer");
    // A layer set from Python may be missing from the list (e.g. a per-camera mapping):
    // it stays offered as what was applied.
    const valid = (current === EXPLICIT_LAYER && explicit) || paths.includes(current) || current === m.get("layer");
    if (!valid) current = explicit ? EXPLICIT_LAYER : "";
    const opts: HTMLOptionElement[] = [];
    if (explicit) opts.push(option(EXPLICIT_LAYER, "(targets given in Python)", current === EXPLICIT_LAYER));
    else if (current === "") opts.push(option("", "(choose a layer)", true));
    if (current !== "" && !paths.includes(current)) opts.push(option(current, current, true));
    for (const c of choices) opts.push(option(c.path, c.type ? `${c.path}  (${c.type})` : c.path, c.path === current));
    replaceChildren(layerSelect, ...opts);
    layerSelect.value = current;
    syncModes();
  }

  function syncTarget(): void {
    const cls = m.get("target_class");
    classInput.hidden = cls === null || cls === undefined;
    if (!classInput.hidden && document.activeElement !== classInput) classInput.value = String(cls);
    targetText.textContent = classInput.hidden ? m.get("target_label") : "";
    targetText.hidden = !classInput.hidden;
    targetName.textContent = classInput.hidden ? "target" : "class";
  }

  function draft(): Record<string, unknown> {
    const args: Record<string, unknown> = { method: methodSelect.value, capture_mode: modeSelect.value || m.get("capture_mode") };
    args.layer = layerSelect.value === EXPLICIT_LAYER ? null : layerSelect.value;
    if (!classInput.hidden) args.target_class = classInput.value === "" ? null : Number(classInput.value);
    return args;
  }

  function updateDirty(): void {
    const d = draft();
    const changed = d.method !== m.get("method") || d.capture_mode !== m.get("capture_mode")
      || (d.layer ?? EXPLICIT_LAYER) !== m.get("layer")
      || ("target_class" in d && d.target_class !== m.get("target_class"));
    dirty.hidden = !changed || records.size === 0;
  }

  function syncExplainControls(): void {
    methodSelect.value = m.get("method");
    delete modeSelect.dataset.draft;
    syncLayers();
    syncTarget();
    updateDirty();
  }

  // -- panels --------------------------------------------------------------------------
  function makePanel(key: string): Panel {
    const canvas = h("canvas", { class: "vl-av-canvas", role: "img", "aria-label": `${key} attribution overlay` });
    const title = h("span", { class: "vl-av-camera" }, key);
    const detail = h("span", { class: "vl-muted vl-mono vl-av-detail" });
    const note = h("span", { class: "vl-badge vl-av-note", hidden: true });
    const flatBadge = h("span", { class: "vl-badge vl-warn vl-av-flat-badge", hidden: true }, "near-flat");
    const hatch = h("div", { class: "vl-av-hatch", hidden: true, "aria-hidden": "true" });
    const range = h("div", { class: "vl-mono vl-av-range" });
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
    range, stats, readout);
    const panel: Panel = {
      key, el: panelEl, canvas, title, detail, note, flatBadge, hatch, range, bar, barMin, barMax, stats, readout,
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
    const name = m.get("colormap");
    const cmap: ColormapName = isColormap(name) ? name : "viridis";
    const all = [...records.values()];
    if (!record) {
      paintCanvas(panel.canvas, panel.base, panel.width, panel.height);
      panel.detail.textContent = "";
      panel.stats.textContent = "no attribution yet";
      panel.bar.style.background = "";
      panel.barMin.textContent = "";
      panel.barMax.textContent = "";
      panel.range.textContent = "";
      markFlat(panel, null);
    } else {
      const { vmin, vmax } = displayRange(m.get("scale"), record, all);
      const rgba = compositeOverlay(panel.base, record.map.data, { colormap: cmap, vmin, vmax, opacity: m.get("opacity") });
      paintCanvas(panel.canvas, rgba, panel.width, panel.height);
      const detail = `${record.method_label} · ${record.layer} · ${MODE_LABELS[record.capture_mode] ?? record.capture_mode}`;
      panel.detail.textContent = detail;
      panel.detail.title = `${detail}\ntarget ${record.target}; score ${formatNumber(record.score)}`;
      panel.bar.style.background = gradientCss(cmap, 24);
      panel.barMin.textContent = formatNumber(vmin);
      panel.barMax.textContent = formatNumber(vmax);
      panel.barMin.title = panel.barMax.title = m.get("scale") === "normalized"
        ? "colour range: this camera's own raw min and max" : "colour range: shared raw range of all cameras";
      const [lh, lw] = record.layer_shape;
      panel.range.textContent = rangeText(record);
      panel.range.title = panel.range.textContent;
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
    updateDirty();
  }

  function paintAll(): void {
    for (const panel of panels.values()) paint(panel);
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

  // -- dataset view ------------------------------------------------------------------------
  let dataset: DatasetPayload | null = null;
  let pendingSample: number | null = null;

  function syncDataset(): void {
    const raw = m.get("dataset");
    dataset = raw && Object.keys(raw).length ? (decode(raw) as DatasetPayload) : null;
    datasetEl.hidden = dataset === null;
    if (!dataset) return;
    dsSummary.textContent =
      `${formatNumber(dataset.samples)} samples in ${formatNumber(dataset.batches)} batches · `
      + `${dataset.method_label} at ${dataset.layer} · ${dataset.score_label} · baseline ${dataset.baseline}`;
    sampleSlider.max = String(Math.max(dataset.kept.length - 1, 0));
    sampleSlider.disabled = dataset.kept.length < 2;
    const current = statSelect.value || m.get("aggregate_stat");
    replaceChildren(statSelect, ...dataset.stats.map((st) => option(st.value, st.label, st.value === current)));
    const classes = dataset.classes ?? [{ value: "all", label: "all classes" }];
    const cls = m.get("aggregate_class") ?? "all";
    replaceChildren(classSelect, ...classes.map((c) => option(c.value, c.label, c.value === cls)));
    classSelect.disabled = classes.length < 2;
    syncSample();
    paintAggregates();
    paintReliance();
  }

  function syncSample(): void {
    if (!dataset) return;
    const index = m.get("sample_index") ?? 0;
    if (document.activeElement !== sampleSlider || pendingSample === null) sampleSlider.value = String(index);
    sampleText.textContent = sampleLabel(dataset, Number(sampleSlider.value));
  }

  function paintAggregates(): void {
    if (!dataset) return;
    const stat = m.get("aggregate_stat");
    const cls = m.get("aggregate_class") ?? "all";
    statSelect.value = stat;
    classSelect.value = cls;
    const maps = aggregateMaps(dataset, cls, stat);
    const strips = dataset.concentration?.[cls] ?? {};
    const name = m.get("colormap");
    const cmap: ColormapName = isColormap(name) ? name : "viridis";
    const cards: HTMLElement[] = [];
    for (const key of m.get("camera_keys") ?? []) {
      const agg = maps[key];
      if (!agg) continue;
      const [height, width] = agg.map.shape;
      const canvas = h("canvas", { class: "vl-av-agg-canvas", role: "img", "aria-label": `${key} ${stat} map` });
      const base = new Uint8ClampedArray(height * width * 4).fill(128);
      const { vmin, vmax } = m.get("scale") === "raw" ? sharedRange(Object.values(maps)) : { vmin: agg.min, vmax: agg.max };
      paintCanvas(canvas, compositeOverlay(base, agg.map.data, { colormap: cmap, vmin, vmax, opacity: 1 }), width, height);
      const badge = h("span", { class: "vl-badge vl-warn vl-av-flat-badge", hidden: !agg.flat, title: agg.flat_reason }, "near-flat");
      const hatch = h("div", { class: "vl-av-hatch", hidden: !agg.flat, "aria-hidden": "true" });
      const card = h("figure", { class: "vl-av-agg", "data-camera": key },
        h("figcaption", { class: "vl-av-head" }, h("span", { class: "vl-av-camera" }, key), badge),
        h("div", { class: "vl-av-canvas-wrap" }, canvas, hatch),
        h("div", { class: "vl-av-legend" },
          h("span", { class: "vl-av-bar-min vl-mono" }, formatNumber(vmin)),
          h("div", { class: "vl-av-bar", style: `background: ${gradientCss(cmap, 24)}` }),
          h("span", { class: "vl-av-bar-max vl-mono" }, formatNumber(vmax))),
        // Percentile maps are of per-sample normalised maps: their span is not in raw units.
        h("div", { class: "vl-mono vl-av-range" }, rangeText({ ...agg, camera_key: key }, stat === "mean" ? "raw span" : "span")));
      const strip = strips[key];
      if (strip) card.append(concentrationStrip(key, strip.most, "most"), concentrationStrip(key, strip.least, "least"));
      card.classList.toggle("vl-av-flat", agg.flat);
      cards.push(card);
    }
    replaceChildren(aggregates, ...cards);
  }

  function concentrationStrip(key: string, entries: ConcentrationPayload[], which: "most" | "least"): HTMLElement {
    const name = m.get("colormap");
    const cmap: ColormapName = isColormap(name) ? name : "viridis";
    const items = entries.map((entry) => {
      const [height, width] = entry.map.shape;
      const thumb = h("canvas", { class: "vl-av-conc-thumb", "aria-hidden": "true" });
      // Each sample's map on its own range: the strip compares where maps look, not how strongly.
      const { vmin, vmax } = finiteRange(entry.map.data);
      const base = new Uint8ClampedArray(height * width * 4).fill(128);
      paintCanvas(thumb, compositeOverlay(base, entry.map.data, { colormap: cmap, vmin, vmax, opacity: 1 }), width, height);
      const text = h("span", { class: "vl-mono" }, concentrationText(entry));
      const kept = entry.kept_index;
      if (kept === null) {
        return h("span", {
          class: "vl-av-conc-sample vl-av-conc-gone", "data-sample": entry.sample_id,
          title: `sample ${entry.sample_id} is not among the samples kept for the slider`,
        }, thumb, text);
      }
      const button = h("button", {
        class: "vl-av-conc-sample", type: "button", "data-sample": entry.sample_id,
        title: `show sample ${entry.sample_id} above (concentration ${entry.concentration.toFixed(3)})`,
      }, thumb, text);
      button.addEventListener("click", () => {
        sampleSlider.value = String(kept);
        if (dataset) sampleText.textContent = sampleLabel(dataset, kept);
        showSample(kept);
      });
      return button;
    });
    return h("div", { class: "vl-av-conc", "data-which": which, role: "group", "aria-label": `${key}: ${which} concentrated samples` },
      h("span", { class: "vl-muted vl-av-conc-label" }, `${which} concentrated`),
      h("div", { class: "vl-av-conc-items" }, ...(items.length ? items : [h("span", { class: "vl-muted" }, "none")])));
  }

  function paintReliance(): void {
    if (!dataset) return;
    const rows = dataset.reliance;
    const top = Math.max(...rows.map((r) => Math.abs(r.drop)), 0);
    replaceChildren(reliance, ...rows.map((r) => {
      const width = top > 0 && Number.isFinite(r.drop) ? (100 * Math.abs(r.drop)) / top : 0;
      const fill = h("div", { class: `vl-av-rel-fill${r.drop < 0 ? " vl-av-rel-negative" : ""}`, style: `width: ${width.toFixed(1)}%` });
      return h("div", { class: "vl-av-rel-row", role: "listitem", "data-camera": r.camera },
        h("span", { class: "vl-av-rel-camera" }, r.camera),
        h("div", { class: "vl-av-rel-track", "aria-hidden": "true" }, fill),
        h("span", { class: "vl-mono vl-av-rel-value", title: `standard deviation over the samples: ${formatNumber(r.std)}` },
          `${formatNumber(r.drop)} ± ${formatNumber(r.std)}${r.drop > 0 ? ` (${Math.round(100 * r.share)}%)` : ""}`));
    }));
    relianceNote.textContent =
      `score drop when the camera's input is replaced by the ${dataset.baseline} baseline: mean ± standard deviation over ${formatNumber(dataset.samples)} samples (share of the summed drops)`;
  }

  function syncDatasetTask(): void {
    const task = m.get("dataset_task") ?? {};
    const running = task.state === "running";
    dsCancel.hidden = !running;
    if (running) {
      dsProgress.textContent = task.total ? `aggregating: ${formatNumber(task.done ?? 0)} / ${formatNumber(task.total)} batches` : `aggregating: ${formatNumber(task.done ?? 0)} batches`;
      datasetEl.hidden = false;
    } else {
      dsProgress.textContent = task.state === "cancelled" ? "cancelled; showing the previous dataset results"
        : task.state === "failed" ? `failed: ${task.message ?? ""}` : "";
      datasetEl.hidden = dataset === null && !task.state;
    }
  }

  function showSample(index: number): void {
    if (running) { pendingSample = index; return; }
    pendingSample = null;
    void runExplain({ sample: index });
  }

  sampleSlider.addEventListener("input", () => {
    if (dataset) sampleText.textContent = sampleLabel(dataset, Number(sampleSlider.value));
  });
  sampleSlider.addEventListener("change", () => showSample(Number(sampleSlider.value)));
  statSelect.addEventListener("change", () => { m.set("aggregate_stat", statSelect.value); m.save_changes(); });
  classSelect.addEventListener("change", () => { m.set("aggregate_class", classSelect.value); m.save_changes(); });
  dsCancel.addEventListener("click", () => {
    const id = m.get("dataset_task")?.id;
    if (id) client.cancel(id);
  });

  // -- recompute ---------------------------------------------------------------------------
  function setRunning(on: boolean): void {
    recompute.disabled = on || offeredModes.length === 0;
    cancel.hidden = !on;
    if (!on) {
      pendingCameras = new Set();
      for (const panel of panels.values()) panel.pending = false;
    }
  }

  async function runExplain(sample?: { sample: number }): Promise<void> {
    if (running || (offeredModes.length === 0 && !sample)) return;
    // A sample change keeps the applied method and layer; Recompute applies the drafts.
    const args = sample ?? draft();
    const keys = m.get("camera_keys") ?? [];
    status.clearError();
    pendingCameras = new Set(keys);
    for (const panel of panels.values()) panel.pending = pendingCameras.has(panel.key);
    setRunning(true);
    paintAll();
    const label = (done: number, total: number) => `explaining: ${done} / ${total} cameras done`;
    status.progress(0, keys.length, label(0, keys.length));
    const request = client.request("explain", args, {
      onProgress(done, total) {
        // Progress counts cameras in camera order (gradient methods finish them together).
        for (const k of keys.slice(0, done)) {
          pendingCameras.delete(k);
          const p = panels.get(k);
          if (p) { p.pending = false; paint(p); }
        }
        status.progress(done, total, label(done, total));
      },
    });
    running = request;
    try {
      await request;
      status.clearProgress();
      syncExplainControls(); // the drafts now are what the kernel applied
    } catch (e) {
      const err = e as CommandError;
      status.clearProgress();
      if (err.cancelled) status.progress(0, 1, "cancelled; showing the previous maps");
      else status.showError(err.message, err.traceback);
    } finally {
      running = null;
      setRunning(false);
      paintAll();
      updateDirty();
      syncSample();
      if (pendingSample !== null) showSample(pendingSample);
    }
  }

  // -- wiring ------------------------------------------------------------------------------
  methodSelect.addEventListener("change", updateDirty);
  modeSelect.addEventListener("change", () => { modeSelect.dataset.draft = modeSelect.value; updateDirty(); });
  layerSelect.addEventListener("change", () => {
    // Through the model: the kernel shares the chosen layer with linked widgets' selection.
    m.set("selected_layer", layerSelect.value);
    m.save_changes();
    syncModes();
    updateDirty();
  });
  classInput.addEventListener("input", updateDirty);
  classInput.addEventListener("keydown", (ev) => { if (ev.key === "Enter") void runExplain(); });
  recompute.addEventListener("click", () => void runExplain());
  cancel.addEventListener("click", () => { if (running) client.cancel(running.id); });

  cmapSelect.addEventListener("change", () => { m.set("colormap", cmapSelect.value); m.save_changes(); });
  opacity.addEventListener("input", () => { m.set("opacity", Number(opacity.value)); m.save_changes(); });
  scaleSelect.addEventListener("change", () => { m.set("scale", scaleSelect.value as Scale); m.save_changes(); });
  viewButton.addEventListener("click", () => setView(m.get("view") === "single" ? "grid" : "single"));

  function syncDisplay(): void {
    cmapSelect.value = m.get("colormap");
    opacity.value = String(m.get("opacity"));
    opacityText.textContent = `${Math.round(m.get("opacity") * 100)}%`;
    scaleSelect.value = m.get("scale");
    paintAll();
    paintAggregates();
  }

  const listeners: [string, () => void][] = [
    ["change:methods", syncMethods],
    ["change:layers", syncLayers],
    ["change:explicit_targets", syncLayers],
    ["change:method", syncExplainControls],
    ["change:layer", syncExplainControls],
    ["change:selected_layer", () => { syncLayers(); updateDirty(); }],
    ["change:capture_mode", syncExplainControls],
    ["change:target_class", syncExplainControls],
    ["change:target_label", syncTarget],
    ["change:camera_keys", syncPanels],
    ["change:images", syncImages],
    ["change:attributions", syncAttributions],
    ["change:colormap", syncDisplay],
    ["change:opacity", syncDisplay],
    ["change:scale", syncDisplay],
    ["change:view", layout],
    ["change:focused_camera", layout],
    ["change:dataset", syncDataset],
    ["change:dataset_task", syncDatasetTask],
    ["change:sample_index", syncSample],
    ["change:aggregate_stat", paintAggregates],
    ["change:aggregate_class", paintAggregates],
  ];
  for (const [event, cb] of listeners) m.on(event, cb);

  syncMethods();
  syncExplainControls();
  syncPanels();
  syncAttributions();
  syncDisplay();
  syncDataset();
  syncDatasetTask();

  return () => {
    for (const [event, cb] of listeners) m.off(event, cb);
    root.removeEventListener("keydown", keepKeys);
    status.dispose();
    client.dispose();
    root.remove();
  };
}

export default { render };
