// Training monitor view (vinlens/widgets/training_monitor.py): one row per watched module,
// with its precision headroom, its latest gradient norm and output std, and a heatmap strip
// of each over the sampled steps (log colour scale). Non-finite steps are marks on the step
// axis above the table; the selected event's origin is named above the table and its row
// highlighted (the modules it reached tinted). Everything drawn comes from the kernel's records.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./training_monitor.css";
import { gradientCss, fillRGBA, type ColormapName } from "../lib/colormap";
import { h, replaceChildren } from "../lib/dom";
import { decodeArray, decodeFloat, formatNumber, type NDArray } from "../lib/payload";
import { statusView } from "../lib/status";
import { setText, VirtualTable, type VTColumn } from "../lib/virtual-table";

type WireFloat = number | { $float: string } | null;
interface Summary { [field: string]: WireFloat }
interface TensorTrace { tensor_path: string; shape: number[]; dtype: string; summary: Summary }
/** vinlens.health.GradientOrigin as to_jsonable sends it. */
export interface GradientOrigin {
  module_path: string;
  call_index: number;
  grad_outputs: TensorTrace[];
  grad_inputs: TensorTrace[];
  parameter_paths: string[];
  propagated_to: string[];
  forward_origin: { module_path: string; call_index: number; input_nonfinite: boolean } | null;
  /** GradientOrigin.entered_nonfinite: the gradient was already NaN/Inf entering the model. */
  entered_nonfinite: boolean;
}
export interface NonFiniteEvent { step: number; origin: GradientOrigin | null; rank?: number; replay?: boolean }

export interface MonitorPayload {
  paths?: string[];
  steps?: any;
  grad_norm?: any;
  std?: any;
  steps_run?: number;
  /** Non-finite steps so far (past the kept events too), and the kept ones. */
  events_total?: number;
  events_kept?: number;
  every?: number;
  on_nonfinite?: string;
}
export interface PrecisionPayload { dtype?: string; headroom?: any; first_overflow_path?: string | null }

export interface TrainingMonitorModel {
  history: MonitorPayload;
  /** The first EVENTS_KEPT events; a new one also arrives alone as an "events" message. */
  events: NonFiniteEvent[];
  precision: PrecisionPayload;
  selected_event: number;
  status: string;
  error: string;
  error_traceback: string;
}

const CMAP: ColormapName = "viridis";
/** Modules with less headroom than this (bits) are highlighted. */
export const LOW_HEADROOM_BITS = 1;

/** One heatmap: log10 of every positive finite value, and the colour scale's range. */
export class LogHeatmap {
  readonly logs: Float32Array;
  readonly vmin: number;
  readonly vmax: number;
  readonly nonFinite: Uint8Array;

  constructor(readonly rows: number, readonly cols: number, values: ArrayLike<number>) {
    this.logs = new Float32Array(rows * cols);
    this.nonFinite = new Uint8Array(rows * cols);
    let lo = Infinity;
    let hi = -Infinity;
    for (let i = 0; i < rows * cols; i++) {
      const v = Number(values[i]);
      if (v === Infinity || v === -Infinity) this.nonFinite[i] = 1;
      const l = v > 0 && Number.isFinite(v) ? Math.log10(v) : NaN;
      this.logs[i] = l;
      if (l < lo) lo = l;
      if (l > hi) hi = l;
    }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    this.vmin = lo;
    this.vmax = hi;
  }

  /** RGBA pixels of one row (transparent where a value is missing, NaN or not positive). */
  rowPixels(row: number, out?: Uint8ClampedArray): Uint8ClampedArray {
    const pixels = out ?? new Uint8ClampedArray(this.cols * 4);
    fillRGBA(CMAP, this.logs.subarray(row * this.cols, (row + 1) * this.cols), this.vmin, this.vmax, pixels);
    for (let c = 0; c < this.cols; c++) {
      if (this.nonFinite[row * this.cols + c]) pixels.set([220, 20, 60, 255], 4 * c);
    }
    return pixels;
  }
}

/** Position in [0, 1] of `step` on an axis from the first to the last sampled step. */
export function stepPosition(step: number, first: number, last: number): number {
  if (!(last > first)) return 0.5;
  return Math.min(1, Math.max(0, (step - first) / (last - first)));
}

/** "3 NaN, 1 +Inf" over a set of gradient traces. */
export function nonFiniteText(traces: TensorTrace[]): string {
  if (!traces.length) return "none seen";
  const total = (name: string) => traces.reduce((sum, t) => sum + (decodeFloat(t.summary[name]) || 0), 0);
  const parts: string[] = [];
  const nan = total("nan_count");
  const pos = total("posinf_count");
  const neg = total("neginf_count");
  if (nan) parts.push(`${formatNumber(nan)} NaN`);
  if (pos) parts.push(`${formatNumber(pos)} +Inf`);
  if (neg) parts.push(`${formatNumber(neg)} −Inf`);
  return parts.length ? parts.join(", ") : "finite";
}

/** One line naming where an event's gradient became non-finite. */
export function originText(event: NonFiniteEvent): string {
  const o = event.origin;
  if (!o) return `Step ${event.step}: non-finite gradients; the replay stayed finite (the step does not repeat).`;
  if (o.forward_origin) {
    const how = o.forward_origin.input_nonfinite ? "received NaN/Inf inputs" : "made NaN/Inf in the forward";
    return `Step ${event.step}: ${o.module_path} (call ${o.call_index}) ${how}; the backward only spread it.`;
  }
  if (o.entered_nonfinite) {
    // No module's backward made it: the loss (or code outside the modules) did.
    return `Step ${event.step}: the gradient was already non-finite where it entered the model `
      + `(${nonFiniteText(o.grad_outputs)}; made by the loss or code outside the modules), first reaching ${o.module_path} (call ${o.call_index}).`;
  }
  const params = o.parameter_paths.length ? `; parameters ${o.parameter_paths.join(", ")}` : "";
  return `Step ${event.step}: gradient first non-finite in ${o.module_path} (call ${o.call_index}): `
    + `incoming ${nonFiniteText(o.grad_outputs)}, to its inputs ${nonFiniteText(o.grad_inputs)}${params}.`;
}

/** The kept events: the traitlet's, or those already received alone when they go further. */
export function mergeEvents(synced: NonFiniteEvent[], received: NonFiniteEvent[]): NonFiniteEvent[] {
  return received.length > synced.length && synced.every((e, i) => e.step === received[i].step && e.rank === received[i].rank) ? received : synced;
}

function headroomText(bits: number): string {
  if (Number.isNaN(bits)) return "";
  if (bits === Infinity) return "∞";
  return bits.toFixed(1);
}

function render({ model, el }: { model: AnyModel<TrainingMonitorModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  let paths: string[] = [];
  let steps: ArrayLike<number> = [];
  let events: NonFiniteEvent[] = [];
  let maps: { grad: LogHeatmap; std: LogHeatmap } | null = null;
  let gradValues: ArrayLike<number> = [];
  let stdValues: ArrayLike<number> = [];
  let headroom: ArrayLike<number> = [];
  let rowOf = new Map<string, number>();
  let reached = new Set<string>();
  let originRow = -1;

  const counters = h("span", { class: "vl-muted vl-tm-counters" });
  const legends = h("span", { class: "vl-tm-legends" });
  const toolbar = h("div", { class: "vl-toolbar vl-tm-toolbar" }, h("span", { class: "vl-title" }, "Training monitor"), counters, legends);
  const eventSelect = h("select", { class: "vl-tm-events", "aria-label": "Non-finite step" });
  const gotoButton = h("button", { class: "vl-button vl-tm-goto", type: "button", title: "Scroll the table to the origin module" }, "Go to module");
  const originLine = h("span", { class: "vl-tm-origin-text" });
  const originBox = h("div", { class: "vl-tm-origin-box", role: "status", "aria-live": "polite" }, eventSelect, originLine, gotoButton);
  const axis = h("div", { class: "vl-tm-axis", "aria-label": "Sampled steps and non-finite events" });
  const tableHost = h("div", { class: "vl-tm-table" });
  const root = h("div", { class: "vl-root vl-training-monitor" }, toolbar, originBox, axis, tableHost, status.el);
  const stopScheme = mountRoot(el, root);

  const strip = (key: string, label: string, title: string): VTColumn => ({ key, label, title, minWidth: 200, grow: 1 });
  const columns: VTColumn[] = [
    { key: "path", label: "Module", minWidth: 160, grow: 1, title: "Registered module path" },
    { key: "headroom", label: "Headroom", minWidth: 144, align: "right", title: `Bits of headroom below the target dtype's largest value (lowest over the module's calls); under ${LOW_HEADROOM_BITS} bit is highlighted` },
    { key: "grad", label: "Grad norm", minWidth: 88, align: "right", title: "L2 norm of the module's own parameters' gradients at the last sampled step" },
    strip("grad_map", "Grad norm over steps", "Gradient norm at each sampled step, log colour scale"),
    { key: "std", label: "Std", minWidth: 88, align: "right", title: "Std of the module's outputs at the last sampled step" },
    strip("std_map", "Activation std over steps", "Output std at each sampled step, log colour scale"),
  ];
  const table = new VirtualTable({
    columns, rowHeight: 22, height: 420, label: "Modules over training steps",
    renderCell: (row, key, cell) => renderCell(row, key, cell),
    rowClass: (row) => (row === originRow ? "vl-tm-origin" : reached.has(paths[row]) ? "vl-tm-reached" : ""),
  });
  tableHost.append(table.el);

  function last(values: ArrayLike<number>, row: number): number {
    const cols = steps.length;
    return cols ? Number(values[row * cols + cols - 1]) : NaN;
  }

  function paintStrip(cell: HTMLElement, row: number, map: LogHeatmap | undefined): void {
    let canvas = cell.firstElementChild as HTMLCanvasElement | null;
    if (!canvas || canvas.tagName !== "CANVAS") {
      canvas = h("canvas", { class: "vl-tm-strip", height: 1, "aria-hidden": "true" });
      replaceChildren(cell, canvas);
    }
    if (!map || !map.cols) { canvas.width = 1; return; }
    if (canvas.width !== map.cols) canvas.width = map.cols;
    const ctx = canvas.getContext("2d");
    if (!ctx) return;
    const image = ctx.createImageData(map.cols, 1);
    map.rowPixels(row, image.data);
    ctx.putImageData(image, 0, 0);
  }

  function renderCell(row: number, key: string, cell: HTMLElement): void {
    switch (key) {
      case "path":
        setText(cell, paths[row] ?? "");
        cell.title = paths[row] ?? "";
        break;
      case "headroom": {
        const bits = Number(headroom[row] ?? NaN);
        setText(cell, headroomText(bits));
        cell.classList.toggle("vl-tm-low", bits < LOW_HEADROOM_BITS);
        break;
      }
      case "grad": {
        // NaN: the module has no parameters of its own (nothing to show, not a fault).
        const v = last(gradValues, row);
        setText(cell, Number.isNaN(v) ? "" : formatNumber(v));
        break;
      }
      case "std": setText(cell, steps.length ? formatNumber(last(stdValues, row)) : ""); break;
      case "grad_map": paintStrip(cell, row, maps?.grad); break;
      case "std_map": paintStrip(cell, row, maps?.std); break;
    }
  }

  function selectedEvent(): NonFiniteEvent | null {
    if (!events.length) return null;
    const index = model.get("selected_event");
    return events[index >= 0 && index < events.length ? index : events.length - 1];
  }

  function drawAxis(): void {
    const first = steps.length ? Number(steps[0]) : 0;
    const lastStep = steps.length ? Number(steps[steps.length - 1]) : 0;
    const selected = selectedEvent();
    const marks = events.map((event, i) => {
      const mark = h("button", {
        class: `vl-tm-mark${event === selected ? " vl-tm-mark-selected" : ""}`, type: "button",
        title: `Step ${event.step}: ${event.origin?.module_path ?? "origin not found"}`,
        "aria-label": `Non-finite step ${event.step}`,
        onclick: () => { model.set("selected_event", i); model.save_changes(); },
      });
      mark.style.left = `${100 * stepPosition(event.step, first, lastStep)}%`;
      return mark;
    });
    const labels = steps.length
      ? [h("span", { class: "vl-tm-tick vl-tm-tick-first" }, `step ${formatNumber(first)}`), h("span", { class: "vl-tm-tick vl-tm-tick-last" }, `step ${formatNumber(lastStep)}`)]
      : [h("span", { class: "vl-tm-tick vl-tm-tick-first" }, "no sampled step yet")];
    replaceChildren(axis, h("div", { class: "vl-tm-track" }, ...marks), ...labels);
  }

  function showOrigin(): void {
    const event = selectedEvent();
    originBox.classList.toggle("vl-tm-has-event", !!event);
    eventSelect.hidden = events.length < 2;
    replaceChildren(eventSelect, ...events.map((e, i) => h("option", { value: i }, `step ${e.step}`)));
    if (event) eventSelect.value = String(events.indexOf(event));
    setText(originLine, event ? originText(event) : "No non-finite gradient so far.");
    const path = event?.origin?.module_path;
    originRow = path !== undefined ? rowOf.get(path) ?? -1 : -1;
    reached = new Set(event?.origin?.propagated_to ?? []);
    gotoButton.hidden = originRow < 0;
  }

  function legend(label: string, map: LogHeatmap | undefined): HTMLElement {
    const bar = h("span", { class: "vl-tm-legend-bar", "aria-hidden": "true" });
    bar.style.background = gradientCss(CMAP);
    const lo = map ? formatNumber(10 ** map.vmin) : "–";
    const hi = map ? formatNumber(10 ** map.vmax) : "–";
    return h("span", { class: "vl-tm-legend", title: `${label}: log colour scale` }, label, " ", lo, bar, hi);
  }

  function sync(): void {
    const payload = model.get("history") ?? {};
    paths = payload.paths ?? [];
    rowOf = new Map(paths.map((p, i) => [p, i]));
    const stepArray: NDArray | null = payload.steps?.$array ? decodeArray(payload.steps) : null;
    steps = stepArray?.data ?? [];
    const grad: NDArray | null = payload.grad_norm?.$array ? decodeArray(payload.grad_norm) : null;
    const std: NDArray | null = payload.std?.$array ? decodeArray(payload.std) : null;
    gradValues = grad?.data ?? [];
    stdValues = std?.data ?? [];
    maps = grad && std ? { grad: new LogHeatmap(paths.length, steps.length, gradValues), std: new LogHeatmap(paths.length, steps.length, stdValues) } : null;
    events = mergeEvents(model.get("events") ?? [], events);
    const total = Math.max(payload.events_total ?? 0, events.length);
    const parts = [`step ${formatNumber(payload.steps_run ?? 0)}`, `sampled every ${payload.every ?? "?"}`, `${steps.length} samples shown`];
    parts.push(total ? `${total} non-finite step${total > 1 ? "s" : ""}` : "no non-finite step");
    setText(counters, parts.join(" · "));
    replaceChildren(legends, legend("grad norm", maps?.grad), legend("std", maps?.std));
    syncPrecision(false);
    showOrigin();
    drawAxis();
    table.setRowCount(paths.length);
    table.refresh();
  }

  function syncPrecision(refresh = true): void {
    const p = model.get("precision") ?? {};
    headroom = p.headroom?.$array ? decodeArray(p.headroom).data : [];
    const header = tableHost.querySelector('[data-key="headroom"] .vl-vt-hlabel');
    const short: Record<string, string> = { "torch.float16": "fp16", "torch.bfloat16": "bf16" };
    if (header) header.textContent = p.dtype ? `Headroom (${short[p.dtype] ?? p.dtype.replace("torch.", "")})` : "Headroom";
    if (refresh) table.refresh();
  }

  function onSelect(): void {
    showOrigin();
    drawAxis();
    table.refresh();
  }

  // The kernel sends each new event alone at once; the `events` traitlet follows later.
  function onMessage(msg: any): void {
    if (msg?.kind !== "events" || !Array.isArray(msg.events) || typeof msg.start !== "number") return;
    if (msg.start > events.length) return; // a gap: the traitlet brings the whole list
    events = [...events.slice(0, msg.start), ...msg.events];
    showOrigin();
    drawAxis();
    table.refresh();
  }
  function onEvents(): void {
    events = mergeEvents(model.get("events") ?? [], events);
    showOrigin();
    drawAxis();
    table.refresh();
  }

  eventSelect.addEventListener("change", () => { model.set("selected_event", Number(eventSelect.value)); model.save_changes(); });
  gotoButton.addEventListener("click", () => { if (originRow >= 0) table.setCursor(originRow, true); });
  const onPrecision = () => syncPrecision();
  model.on("change:history", sync);
  model.on("change:events", onEvents);
  model.on("msg:custom", onMessage);
  model.on("change:precision", onPrecision);
  model.on("change:selected_event", onSelect);
  sync();
  return () => {
    stopScheme();
    model.off("change:history", sync);
    model.off("change:events", onEvents);
    model.off("msg:custom", onMessage);
    model.off("change:precision", onPrecision);
    model.off("change:selected_event", onSelect);
    table.destroy();
    status.dispose();
  };
}

export default { render };
