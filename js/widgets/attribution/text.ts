// Pure helpers of the attribution viewer: what to offer, how to word a number, which
// range a map is coloured on. No DOM state here, so vitest can check each rule alone.
import { COLORMAP_NAMES, type ColormapName } from "../../lib/colormap";
import { h } from "../../lib/dom";
import { formatNumber } from "../../lib/payload";
import type {
  AggregatePayload, AttributionPayload, ConcentrationPayload, DatasetPayload, LayerChoice, Scale,
} from "./types";

export const MODE_LABELS: Record<string, string> = {
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

export function finiteRange(data: ArrayLike<number>): { vmin: number; vmax: number } {
  let vmin = Infinity;
  let vmax = -Infinity;
  for (let i = 0; i < data.length; i++) {
    const v = Number(data[i]);
    if (Number.isFinite(v)) { vmin = Math.min(vmin, v); vmax = Math.max(vmax, v); }
  }
  return vmin <= vmax ? { vmin, vmax } : { vmin: 0, vmax: 0 };
}

export function sharedRange(maps: AggregatePayload[]): { vmin: number; vmax: number } {
  const lo = Math.min(0, ...maps.map((a) => a.min).filter(Number.isFinite));
  const hi = Math.max(...maps.map((a) => a.max).filter(Number.isFinite), lo);
  return { vmin: lo, vmax: hi };
}

export function colormapOf(name: string): ColormapName {
  return (COLORMAP_NAMES as readonly string[]).includes(name) ? (name as ColormapName) : "viridis";
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

export function option(value: string, label: string, selected: boolean): HTMLOptionElement {
  const o = h("option", { value }, label);
  o.selected = selected;
  return o;
}

export function labelled(text: string, control: HTMLElement): HTMLLabelElement {
  return h("label", { class: "vl-av-field" }, h("span", { class: "vl-muted" }, text), control);
}

/**
 * One line a newcomer needs beside a map whose numbers look odd. A near-flat map (often
 * about 1/3 everywhere: Grad-CAM++'s weights of a flat gradient) carries no location, and
 * its colours only stretch a tiny range; Grad-CAM++ raw values are on their own scale (its
 * weights are not Grad-CAM's), said where ``scaleNote`` asks for it (once per view).
 */
export function mapExplanation(
  record: Pick<AttributionPayload, "method" | "min" | "max" | "flat">, scaleNote = true,
): string {
  if (Number.isFinite(record.min) && (record.min === record.max || record.flat)) {
    const spread = record.max - record.min;
    const level = (record.min + record.max) / 2;
    if (spread === 0) {
      return `one constant value (${formatNumber(level)}) over the whole map: this camera's map shows no location`;
    }
    if (spread <= 1e-4 * Math.max(Math.abs(level), 1e-12)) {
      return `about ${formatNumber(level)} everywhere (spread ${formatNumber(spread)}): this map shows no location; its colours stretch a tiny range`;
    }
    return "varies little next to the widest camera: its colours stretch a small range, so it says little about where this camera looks";
  }
  if (scaleNote && record.method === "grad_cam_plus_plus") {
    return "Grad-CAM++ raw values use their own scale: compare cameras within this method, not with Grad-CAM's numbers";
  }
  return "";
}

/** The share of the largest camera's span, in plain words. */
export function spanWords(
  record: Pick<AttributionPayload, "camera_key" | "span" | "relative_span" | "largest_camera" | "flat">,
  noun = "value range",
): string {
  if (!Number.isFinite(record.relative_span) || !record.largest_camera || record.largest_camera === record.camera_key) {
    return rangeText(record, noun);
  }
  const pct = 100 * record.relative_span;
  const share = pct >= 10 ? pct.toFixed(0) : pct >= 0.001 ? pct.toPrecision(2) : "<0.001";
  return `${noun} ${formatNumber(record.span)}, ${share}% of the widest camera (${record.largest_camera})`;
}
