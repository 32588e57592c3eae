// The dataset view: the pass's progress (started from Python, cancelled from here), a
// slider over the kept samples, the aggregate map of each camera with its most and least
// concentrated samples, and one reliance bar per camera. Every number comes from the
// kernel's dataset record; the browser only lays it out.
import { gradientCss } from "../../lib/colormap";
import { h, replaceChildren } from "../../lib/dom";
import { compositeOverlay, paintCanvas } from "../../lib/overlay";
import { decode, formatNumber } from "../../lib/payload";
import type { CommandClient } from "../../lib/protocol";
import {
  aggregateMaps, colormapOf, concentrationText, finiteRange, labelled, mapExplanation, option, rangeText, sampleLabel,
  sharedRange, spanWords,
} from "./text";
import type { ConcentrationPayload, DatasetPayload, Model, ReliancePayload } from "./types";

/** Decimals that give the largest magnitude three significant digits (0 to 6). */
export function decimalsFor(values: readonly number[]): number {
  const top = Math.max(0, ...values.filter(Number.isFinite).map(Math.abs));
  if (top === 0) return 3;
  return Math.min(6, Math.max(0, 2 - Math.floor(Math.log10(top))));
}

/** A number at fixed decimals; a non-zero value that rounds to zero says so instead of "0.000". */
export function fixed(value: number, decimals: number): string {
  if (!Number.isFinite(value)) return formatNumber(value);
  const text = Math.abs(value).toFixed(decimals);
  if (value !== 0 && Number(text) === 0) return `${value < 0 ? ">-" : "<"}${(10 ** -decimals).toFixed(decimals)}`;
  return value < 0 ? `-${text}` : text;
}

/**
 * Reliance rows in one number format: every drop and deviation at the decimals of the
 * largest one, a camera whose removal raises the score said in words, and a share only for
 * drops (a share of the summed drops is meaningless for a rise).
 */
export function relianceText(rows: readonly ReliancePayload[]): string[] {
  const decimals = decimalsFor(rows.flatMap((r) => [r.drop, r.std]));
  return rows.map((r) => {
    const base = `${r.drop > 0 ? "+" : ""}${fixed(r.drop, decimals)} ± ${fixed(r.std, decimals)}`;
    if (!Number.isFinite(r.drop)) return base;
    if (r.drop > 0) {
      const pct = Math.round(100 * r.share);
      return `${base} (${pct === 0 ? "<1" : pct}% of all drops)`;
    }
    if (r.drop < 0) return `${base} (score rises without it)`;
    return `${base} (no effect)`;
  });
}

/**
 * Where a reliance bar starts and how wide it is, in percent of the track, on one axis
 * from the most negative drop (or 0) to the largest drop (or 0): a negative drop grows
 * left of the zero line, a positive one right of it, both to scale.
 */
export function relianceBar(drop: number, rows: readonly ReliancePayload[]): { zero: number; left: number; width: number } {
  const finite = rows.map((r) => r.drop).filter(Number.isFinite);
  const lo = Math.min(0, ...finite);
  const hi = Math.max(0, ...finite);
  const span = hi - lo;
  const zero = span > 0 ? (100 * -lo) / span : 0;
  if (!(span > 0) || !Number.isFinite(drop)) return { zero, left: zero, width: 0 };
  const width = (100 * Math.abs(drop)) / span;
  return { zero, left: drop < 0 ? zero - width : zero, width };
}

/** " · 2 maps with NaN or inf left out": said once in the summary, nothing when none. */
export function nonfiniteText(count: number): string {
  if (!(count > 0)) return "";
  return ` · ${formatNumber(count)} ${count === 1 ? "map" : "maps"} with NaN or inf left out of the statistics`;
}

export interface DatasetView {
  el: HTMLElement;
  slider: HTMLInputElement;
  syncDataset(): void;
  syncSample(): void;
  syncTask(): void;
  paintAggregates(): void;
  dispose(): void;
}

export function datasetView(
  m: Model, client: CommandClient, hooks: { showSample(index: number): void; samplePending(): boolean },
): DatasetView {
  const summary = h("span", { class: "vl-muted vl-av-ds-summary" });
  const progress = h("span", { class: "vl-muted vl-av-ds-progress" });
  const cancel = h("button", { class: "vl-button vl-av-ds-cancel", type: "button", hidden: true }, "Cancel");
  const slider = h("input", {
    class: "vl-av-sample", type: "range", min: 0, max: 0, step: 1, value: 0, "aria-label": "Sample shown above",
  });
  const sampleText = h("span", { class: "vl-mono vl-av-sample-label" });
  const statSelect = h("select", { class: "vl-input vl-av-stat", "aria-label": "Aggregate statistic" });
  const classSelect = h("select", { class: "vl-input vl-av-agg-class", "aria-label": "Class of the aggregate maps" });
  const aggregates = h("div", { class: "vl-av-aggregates" });
  const flatNote = h("div", { class: "vl-muted vl-av-flat-summary", hidden: true });
  const reliance = h("div", { class: "vl-av-reliance", role: "list", "aria-label": "Camera reliance" });
  const relianceNote = h("div", { class: "vl-muted vl-av-reliance-note" });
  const el = h("section", { class: "vl-av-dataset", hidden: true, "aria-label": "Dataset view" },
    h("div", { class: "vl-toolbar vl-av-ds-head" },
      h("span", { class: "vl-title" }, "Dataset"), summary, progress, cancel),
    h("div", { class: "vl-toolbar vl-av-ds-controls" },
      labelled("sample", h("span", { class: "vl-av-sample-wrap" }, slider, sampleText)),
      labelled("aggregate", statSelect), labelled("samples of", classSelect)),
    h("div", { class: "vl-av-ds-block" }, h("div", { class: "vl-av-ds-heading" }, "Aggregate maps"), aggregates, flatNote),
    h("div", { class: "vl-av-ds-block" },
      h("div", { class: "vl-av-ds-heading" }, "Camera reliance"), reliance, relianceNote),
  );

  let dataset: DatasetPayload | null = null;

  function syncDataset(): void {
    const raw = m.get("dataset");
    dataset = raw && Object.keys(raw).length ? (decode(raw) as DatasetPayload) : null;
    el.hidden = dataset === null && !m.get("dataset_task")?.state;
    if (!dataset) return;
    summary.textContent =
      `${formatNumber(dataset.samples)} samples in ${formatNumber(dataset.batches)} batches · `
      + `${dataset.method_label} at ${dataset.layer} · ${dataset.score_label} · baseline ${dataset.baseline}`
      + nonfiniteText(dataset.nonfinite_maps ?? 0);
    slider.max = String(Math.max(dataset.kept.length - 1, 0));
    slider.disabled = dataset.kept.length < 2;
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
    if (document.activeElement !== slider || !hooks.samplePending()) slider.value = String(index);
    sampleText.textContent = sampleLabel(dataset, Number(slider.value));
  }

  function paintAggregates(): void {
    if (!dataset) return;
    const stat = m.get("aggregate_stat");
    const cls = m.get("aggregate_class") ?? "all";
    statSelect.value = stat;
    classSelect.value = cls;
    const maps = aggregateMaps(dataset, cls, stat);
    const strips = dataset.concentration?.[cls] ?? {};
    const cmap = colormapOf(m.get("colormap"));
    const cards: HTMLElement[] = [];
    const uniform: string[] = [];
    let scaleNoted = false;
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
        h("div", { class: "vl-av-range", title: rangeText({ ...agg, camera_key: key }) },
          spanWords({ ...agg, camera_key: key }, stat === "mean" ? "value range" : "normalised range")));
      // Grad-CAM++'s raw scale only matters for the raw mean map, not the normalised percentiles.
      const words = mapExplanation(
        { ...agg, method: stat === "mean" ? dataset.method ?? "" : "" }, !scaleNoted && !agg.flat);
      if (words && !agg.flat) scaleNoted = true;
      if (words) card.append(h("div", { class: "vl-muted vl-av-explain-line" }, words));
      const strip = strips[key];
      if (strip && typeof strip.uniform === "number") {
        // Every kept sample scores the same: one line instead of a row of equal numbers.
        const words = `every sample's map ≈ ${strip.uniform.toFixed(2)} concentrated`;
        card.append(h("div", { class: "vl-muted vl-av-conc-uniform" }, words));
        uniform.push(key);
      } else if (strip) {
        card.append(concentrationStrip(key, strip.most, "most"), concentrationStrip(key, strip.least, "least"));
      }
      card.classList.toggle("vl-av-flat", agg.flat);
      cards.push(card);
    }
    replaceChildren(aggregates, ...cards);
    flatNote.hidden = uniform.length === 0;
    flatNote.textContent = uniform.length === 0 ? ""
      : `${uniform.join(", ")}: all kept samples are equally concentrated (near-uniform maps), so no sample is listed; `
        + "concentration is the share of a map's total in its hottest 10 % of cells (0.10 for a uniform map)";
  }

  function concentrationStrip(key: string, entries: ConcentrationPayload[], which: "most" | "least"): HTMLElement {
    const cmap = colormapOf(m.get("colormap"));
    const items = entries.map((entry) => {
      const [height, width] = entry.map.shape;
      const thumb = h("canvas", { class: "vl-av-conc-thumb", "aria-hidden": "true" });
      // Each sample's map on its own range: the strip compares where maps look, not how strongly.
      const { vmin, vmax } = finiteRange(entry.map.data);
      const base = new Uint8ClampedArray(height * width * 4).fill(128);
      paintCanvas(thumb, compositeOverlay(base, entry.map.data, { colormap: cmap, vmin, vmax, opacity: 1 }), width, height);
      const label = concentrationText(entry);
      const gone = entry.kept_index === null;
      // "(not kept)" is one unbreakable phrase on its own line under the number.
      const text = gone
        ? h("span", { class: "vl-av-conc-text" },
          h("span", { class: "vl-mono" }, label.replace(/ \(not kept\)$/, "")),
          h("span", { class: "vl-av-conc-gone-note" }, " (not kept)"))
        : h("span", { class: "vl-av-conc-text vl-mono" }, label);
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
        slider.value = String(kept);
        if (dataset) sampleText.textContent = sampleLabel(dataset, kept);
        hooks.showSample(kept);
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
    const words = relianceText(rows);
    replaceChildren(reliance, ...rows.map((r, i) => {
      const { zero, left, width } = relianceBar(r.drop, rows);
      const fill = h("div", {
        class: `vl-av-rel-fill${r.drop < 0 ? " vl-av-rel-negative" : ""}`,
        style: `left: ${left.toFixed(1)}%; width: ${width.toFixed(1)}%`,
      });
      const axis = h("div", { class: "vl-av-rel-zero", style: `left: ${zero.toFixed(1)}%` });
      return h("div", { class: "vl-av-rel-row", role: "listitem", "data-camera": r.camera },
        h("span", { class: "vl-av-rel-camera" }, r.camera),
        h("div", { class: "vl-av-rel-track", "aria-hidden": "true" }, fill, axis),
        h("span", { class: "vl-mono vl-av-rel-value", title: `mean score drop ${formatNumber(r.drop)}, standard deviation ${formatNumber(r.std)}` },
          words[i]));
    }));
    const negative = rows.some((r) => r.drop < 0);
    relianceNote.textContent =
      `score drop when the camera's input is replaced by the ${dataset.baseline} baseline: mean ± standard deviation over `
      + `${formatNumber(dataset.samples)} samples`
      + (negative ? "; a bar left of the line is a camera whose removal raises the score" : "");
  }

  function syncTask(): void {
    const task = m.get("dataset_task") ?? {};
    const running = task.state === "running";
    cancel.hidden = !running;
    if (running) {
      const phase = task.phase === "mean" ? "mean image" : "aggregating";
      const unit = task.phase === "mean" ? "batches read" : "batches";
      progress.textContent = task.total
        ? `${phase}: ${formatNumber(task.done ?? 0)} / ${formatNumber(task.total)} ${unit}`
        : `${phase}: ${formatNumber(task.done ?? 0)} ${unit}`;
      el.hidden = false;
    } else {
      progress.textContent = task.state === "cancelled" ? "cancelled; showing the previous dataset results"
        : task.state === "failed" ? `failed: ${task.message ?? ""}` : "";
      el.hidden = dataset === null && !task.state;
    }
  }

  const onInput = (): void => { if (dataset) sampleText.textContent = sampleLabel(dataset, Number(slider.value)); };
  const onChange = (): void => hooks.showSample(Number(slider.value));
  const onStat = (): void => { m.set("aggregate_stat", statSelect.value); m.save_changes(); };
  const onClass = (): void => { m.set("aggregate_class", classSelect.value); m.save_changes(); };
  const onCancel = (): void => {
    const id = m.get("dataset_task")?.id;
    if (id) client.cancel(id);
  };
  slider.addEventListener("input", onInput);
  slider.addEventListener("change", onChange);
  statSelect.addEventListener("change", onStat);
  classSelect.addEventListener("change", onClass);
  cancel.addEventListener("click", onCancel);

  return {
    el, slider, syncDataset, syncSample, syncTask, paintAggregates,
    dispose() {
      slider.removeEventListener("input", onInput);
      slider.removeEventListener("change", onChange);
      statSelect.removeEventListener("change", onStat);
      classSelect.removeEventListener("change", onClass);
      cancel.removeEventListener("click", onCancel);
    },
  };
}

