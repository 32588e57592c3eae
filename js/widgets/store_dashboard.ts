// StoreDashboardWidget front end: the health of one immutable VIN offline store.
//
// The kernel acquires statistics in the background (capture request -> engine -> payload) and
// publishes its progress in the `acquisition` traitlet and the result in `payload`, so every
// view of the widget (and a view opened after a page reload) shows the same state; Refresh and
// Cancel are protocol commands. Histograms are binned here from the sampled values, which
// arrive as binary float32 arrays; all summary numbers come from the engine.
//
// Everything from the kernel is inserted as text (js/lib/dom.ts h(), SVG text nodes).
import type { AnyModel, RenderProps } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./store_dashboard.css";
import {
  barChartSvg, binValues, histogramSvg, scatterPlot, type Histogram, type ScatterPlot,
} from "../lib/charts";
import { collapsedList, h, replaceChildren } from "../lib/dom";
import { decode, formatNumber, type NDArray, type Table } from "../lib/payload";
import { CommandClient, type CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";

export interface Summary {
  count: number;
  minimum: number | null;
  mean: number | null;
  maximum: number | null;
}

/** One histogram series: the engine's sampled values, binned here. */
export interface Series {
  key: string;
  title: string;
  summary: Summary | null;
  count: number;
  values: NDArray | null;
  /** Why the series is empty (e.g. the store has no scene labels), or null. */
  unavailable: string | null;
}

export interface Problem {
  severity: "error" | "warning" | "notice";
  title: string;
  detail: string;
}

export interface PairSeries {
  name: string;
  rri: NDArray;
  value: NDArray;
  count: number;
  pearson: number | null;
}

export interface Acquisition {
  id: string;
  state: "idle" | "running" | "done" | "failed" | "cancelled";
  step: string;
  done: number;
  total: number;
  /** What done/total count ("rows"), or "" for a step without a count. */
  unit?: string;
  trigger: string;
  message: string;
}

export interface Replacement {
  replaced: boolean;
  when: "" | "between" | "during";
  message: string;
  previous_digest: string;
  current_digest: string;
}

export interface DashboardModel {
  store_path: string;
  max_samples: number | null;
  acquisition: Acquisition;
  payload: Record<string, unknown>;
  replacement: Replacement;
  stale: boolean;
  status: string;
  error: string;
  error_traceback: string;
}


const TABS = [
  ["overview", "Overview"],
  ["components", "RRI components"],
  ["poses", "Candidate poses"],
  ["blocks", "Blocks"],
  ["memory", "Memory & backbone"],
  ["batch", "Batch preview"],
] as const;
type TabKey = (typeof TABS)[number][0];

const BIN_CHOICES = [10, 20, 30, 50, 80];

/** Bytes with the unit that suits the value: B, KiB, MiB, GiB or TiB. */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${formatNumber(v)} B` : `${v.toFixed(Math.abs(v) >= 100 ? 0 : 1)} ${units[u]}`;
}

/** The engine reports memory in MiB; shown with the unit that suits each value. */
export function formatMiB(mib: number | null | undefined): string {
  return mib === null || mib === undefined ? "–" : formatBytes(mib * 1024 * 1024);
}

function num(v: number | null | undefined): string {
  return v === null || v === undefined ? "–" : formatNumber(v);
}

function summaryText(s: Summary | null): string {
  if (!s) return "no values";
  if (!s.count) return "no finite values";
  return `n ${formatNumber(s.count)} · min ${num(s.minimum)} · mean ${num(s.mean)} · max ${num(s.maximum)}`;
}

/** Histogram of one series at the chosen bin count. */
export function seriesHistogram(series: Series, bins: number): Histogram | null {
  return series.values ? binValues(series.values.data, bins) : null;
}

function table(headers: string[], rows: (string | number | Node)[][], numeric: boolean[] = []): HTMLTableElement {
  return h("table", { class: "vl-table vl-sd-table" },
    h("thead", {}, h("tr", {}, ...headers.map((t, i) => h("th", { class: numeric[i] ? "vl-num" : "" }, t)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c, i) => h("td", { class: numeric[i] ? "vl-num" : "" }, c))))));
}

/** "1 integrity problem · 2 warnings · 1 notice" */
export function problemsTitle(problems: Problem[]): string {
  const count = (sev: Problem["severity"]) => problems.filter((p) => p.severity === sev).length;
  const parts: string[] = [];
  const e = count("error");
  const w = count("warning");
  const n = count("notice");
  if (e) parts.push(`${e} integrity problem${e > 1 ? "s" : ""}`);
  if (w) parts.push(`${w} warning${w > 1 ? "s" : ""}`);
  if (n) parts.push(`${n} notice${n > 1 ? "s" : ""}`);
  return parts.join(" · ");
}

function card(title: string, ...children: (Node | string | null)[]): HTMLElement {
  return h("section", { class: "vl-sd-card" }, h("h4", { class: "vl-sd-card-title" }, title), ...children);
}

function render({ model, el }: RenderProps<DashboardModel>): () => void {
  const client = new CommandClient(model as unknown as AnyModel);
  const status = statusView(model as unknown as AnyModel);
  const ui: { tab: TabKey; bins: number; logY: boolean; component: string } = {
    tab: "overview", bins: 30, logY: false, component: "",
  };
  let scatters: ScatterPlot[] = [];

  const refreshBtn = h("button", { class: "vl-button vl-primary vl-sd-refresh", type: "button", title: "Acquire the statistics again with a new request" }, "Refresh");
  const cancelBtn = h("button", { class: "vl-button vl-sd-cancel", type: "button", hidden: true }, "Cancel");
  const samplesInput = h("input", {
    class: "vl-input vl-sd-max-samples", type: "number", min: 1, step: 1, "aria-label": "Sample at most this many rows (empty: every row)",
    title: "Rows scanned for tensor statistics; empty scans every row", placeholder: "all",
  });
  const pathEl = h("span", { class: "vl-mono vl-sd-path" });
  // The rows the numbers shown come from (the kernel's words), beside the cap asked for.
  const scopeEl = h("span", { class: "vl-muted vl-sd-scope", "aria-live": "polite" });
  const stepEl = h("span", { class: "vl-muted vl-sd-step", "aria-live": "polite" });
  const toolbar = h("div", { class: "vl-toolbar" },
    h("span", { class: "vl-title" }, "VIN store"), pathEl,
    h("span", { class: "vl-sd-spacer" }),
    h("label", { class: "vl-muted" }, "sample at most ", samplesInput, " rows"), scopeEl,
    refreshBtn, cancelBtn);
  const banner = h("div", { class: "vl-sd-replaced", role: "alert", hidden: true });
  const body = h("div", { class: "vl-sd-body" });
  const root = h("div", { class: "vl-root vl-sd" }, toolbar, status.el, stepEl, banner, body);
  const stopScheme = mountRoot(el, root);

  function syncSamples() {
    const v = model.get("max_samples");
    samplesInput.value = v === null || v === undefined ? "" : String(v);
  }

  refreshBtn.addEventListener("click", () => {
    const raw = samplesInput.value.trim();
    const maxSamples = raw === "" ? null : Number(raw);
    const req = client.request("refresh", { max_samples: maxSamples });
    req.catch((err: CommandError) => {
      if (!err.cancelled && !model.get("error")) status.showError(err.message, err.traceback);
    });
  });
  cancelBtn.addEventListener("click", () => {
    const acq = model.get("acquisition");
    if (acq?.id) client.cancel(acq.id);
  });

  function renderAcquisition() {
    const acq = model.get("acquisition") ?? ({} as Acquisition);
    const running = acq.state === "running";
    refreshBtn.disabled = running;
    cancelBtn.hidden = !running;
    if (running) {
      status.progress(acq.done, acq.total, acq.total ? `${acq.step}: ${formatNumber(acq.done)} / ${formatNumber(acq.total)} ${acq.unit ?? ""}`.trim() : `${acq.step}…`);
      // No count for this step: an indeterminate bar rather than an empty one.
      if (!acq.total) status.el.querySelector(".vl-progress")?.removeAttribute("value");
      stepEl.textContent = "";
    } else {
      status.clearProgress();
      stepEl.textContent = acq.state === "cancelled" ? "Acquisition cancelled; the results below are unchanged." : "";
    }
    root.classList.toggle("vl-sd-busy", running);
  }

  function renderReplacement() {
    const r = model.get("replacement");
    const stale = model.get("stale");
    if (r?.replaced || stale) {
      replaceChildren(banner,
        h("strong", {}, r?.when === "during" ? "Store replaced while reading. " : "Store replaced. "),
        r?.message ?? "",
        stale ? h("div", { class: "vl-sd-stale-note" }, "The statistics below belong to the previous store and are out of date.") : null);
      banner.hidden = false;
    } else {
      banner.hidden = true;
      replaceChildren(banner);
    }
  }

  // ---- payload sections ----------------------------------------------------------------
  function headerSection(p: any): HTMLElement {
    const hd = p.header;
    const splits = Object.entries(hd.split_counts as Record<string, number>);
    const digest = String(hd.digest ?? "");
    const copy = h("button", {
      class: "vl-button vl-sd-copy", type: "button", title: "Copy the full digest", "aria-label": "Copy digest",
    }, "copy");
    copy.addEventListener("click", () => { void globalThis.navigator?.clipboard?.writeText(digest); });
    const items: [string, Node | string][] = [
      ["Path", h("span", { class: "vl-mono", title: String(hd.store_dir) }, String(hd.store_dir))],
      ["Format version", String(hd.version)],
      ["Generation digest", h("span", {}, h("span", { class: "vl-mono", title: digest }, digest.slice(0, 16)), " ", copy)],
      ["Samples", `${formatNumber(hd.num_samples)} (${String(hd.scan_scope ?? `${formatNumber(hd.sampled_samples)} read`)})`],
      ["Scenes", formatNumber(hd.num_scenes)],
      ["Snippets", formatNumber(hd.num_snippets)],
      ["Splits", splits.length ? splits.map(([k, v]) => `${k} ${formatNumber(v)}`).join(" · ") : "none"],
      ["Numeric bytes", formatBytes(hd.numeric_bytes)],
    ];
    const blocks = Object.entries((hd.materialized_blocks ?? {}) as Record<string, boolean>);
    const chips = h("div", { class: "vl-sd-chips" },
      ...blocks.map(([k, v]) => h("span", { class: `vl-badge ${v ? "vl-ok" : ""}`, title: v ? "materialized" : "not materialized" }, `${v ? "✓" : "✗"} ${k}`)),
      h("span", { class: `vl-badge ${hd.scene_labels_available ? "vl-ok" : "vl-warn"}` }, hd.scene_labels_available ? "scene labels" : "no scene labels"));
    return h("section", { class: "vl-sd-header", "aria-label": "Store summary" },
      h("dl", { class: "vl-sd-dl" }, ...items.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      chips);
  }

  function problemsSection(p: any): HTMLElement {
    const problems = (p.problems ?? []) as Problem[];
    if (!problems.length) {
      return h("div", { class: "vl-sd-problems vl-sd-ok" }, h("span", { class: "vl-badge vl-ok" }, "✓"), " No integrity problems found.");
    }
    const errors = problems.filter((x) => x.severity === "error").length;
    return h("section", { class: `vl-sd-problems ${errors ? "vl-sd-has-errors" : ""}`, role: errors ? "alert" : "status", "aria-label": "Integrity problems" },
      h("h4", { class: "vl-sd-problems-title" }, problemsTitle(problems)),
      h("ul", {}, ...problems.map((x) => h("li", { class: `vl-sd-problem vl-sd-${x.severity}` },
        h("span", { class: "vl-sd-sev" }, x.severity), " ", h("strong", {}, x.title), x.detail ? h("div", { class: "vl-sd-detail" }, x.detail) : null))));
  }

  function histCard(s: Series): HTMLElement {
    const hist = s.unavailable ? null : seriesHistogram(s, ui.bins);
    const chart = hist && hist.total > 0
      ? histogramSvg(hist, { xLabel: s.title, logY: ui.logY, width: 280, height: 160 })
      : h("div", { class: "vl-muted vl-sd-empty" }, s.unavailable ?? "no finite values sampled");
    return h("figure", { class: "vl-sd-hist", "data-key": s.key, tabindex: 0, "aria-label": `${s.title}: ${summaryText(s.summary)}` },
      h("figcaption", {}, h("strong", {}, s.title), h("div", { class: "vl-muted vl-sd-summary" }, summaryText(s.summary))),
      chart);
  }

  function histControls(): HTMLElement {
    const bins = h("select", { class: "vl-input vl-sd-bins", "aria-label": "Histogram bins" },
      ...BIN_CHOICES.map((b) => h("option", { value: b, selected: b === ui.bins }, `${b} bins`)));
    bins.addEventListener("change", () => { ui.bins = Number(bins.value); renderBody(); });
    const log = h("input", { type: "checkbox", class: "vl-sd-logy", checked: ui.logY });
    log.addEventListener("change", () => { ui.logY = log.checked; renderBody(); });
    return h("div", { class: "vl-toolbar vl-sd-histctl" }, bins, h("label", {}, log, " log count"));
  }

  function overviewTab(p: any): HTMLElement {
    const splits = Object.entries(p.header.split_counts as Record<string, number>);
    const total = splits.reduce((a, [, v]) => a + v, 0);
    const splitChart = splits.length
      ? barChartSvg(splits.map(([k, v]) => ({ label: k, value: v, text: `${formatNumber(v)} (${total ? ((100 * v) / total).toFixed(1) : 0}%)` })), { width: 280 })
      : h("div", { class: "vl-muted" }, "no splits");
    return h("div", { class: "vl-sd-tab" }, histControls(),
      h("div", { class: "vl-sd-grid" },
        card("Split counts", splitChart),
        ...(p.histograms as Series[]).map(histCard)));
  }

  function componentsTab(p: any): HTMLElement {
    const comps = p.components as Series[];
    const pairs = p.pairs as { components: PairSeries[]; unpaired_count: number; unpaired_examples: string[]; paired_samples: number };
    if (!comps.length) {
      return h("div", { class: "vl-sd-tab vl-muted" }, p.header.materialized_blocks?.rri_components === false
        ? "This store does not materialize RRI components." : "No RRI component values were sampled.");
    }
    if (!ui.component || !pairs.components.some((c) => c.name === ui.component)) ui.component = pairs.components[0]?.name ?? "";
    const select = h("select", { class: "vl-input vl-sd-component", "aria-label": "Component for the scatter" },
      ...pairs.components.map((c) => h("option", { value: c.name, selected: c.name === ui.component }, c.name)));
    select.addEventListener("change", () => { ui.component = select.value; renderBody(); });
    const chosen = pairs.components.find((c) => c.name === ui.component);
    let scatterEl: Node = h("div", { class: "vl-muted vl-sd-empty" }, "no identity-aligned pairs");
    if (chosen && chosen.count > 0) {
      const sp = scatterPlot(chosen.value.data, chosen.rri.data, { xLabel: chosen.name, yLabel: "RRI", width: 360, height: 240 });
      scatters.push(sp);
      scatterEl = sp.el;
    }
    const unpaired = pairs.unpaired_count;
    const pairNote = h("div", { class: `vl-sd-pairnote ${unpaired ? "vl-sd-warnline" : "vl-muted"}` },
      `${formatNumber(unpaired)} labelled row${unpaired === 1 ? "" : "s"} without candidate IDs (unpaired; marginals still counted)`,
      unpaired && pairs.unpaired_examples.length
        ? h("div", { class: "vl-sd-examples" }, collapsedList(pairs.unpaired_examples, {
          total: unpaired, listClass: "vl-mono", what: "unpaired sample keys",
        }))
        : null);
    const stats = chosen
      ? h("div", { class: "vl-muted" }, `${formatNumber(chosen.count)} pairs` + (chosen.pearson === null || chosen.pearson === undefined || Number.isNaN(chosen.pearson) ? "" : ` · Pearson r ${chosen.pearson.toFixed(3)}`))
      : null;
    return h("div", { class: "vl-sd-tab" }, histControls(),
      h("div", { class: "vl-sd-grid" },
        card("RRI vs component (identity-aligned)", h("div", { class: "vl-toolbar" }, select), scatterEl, stats, pairNote),
        ...comps.map(histCard)));
  }

  function posesTab(p: any): HTMLElement {
    const poses = p.poses as Series[];
    if (!poses.length) return h("div", { class: "vl-sd-tab vl-muted" }, "No candidate poses in this store.");
    return h("div", { class: "vl-sd-tab" },
      card("Candidate poses (reference-rig frame)",
        table(["quantity", "count", "min", "mean", "max"],
          poses.map((x) => [x.title, num(x.summary?.count), num(x.summary?.minimum), num(x.summary?.mean), num(x.summary?.maximum)]),
          [false, true, true, true, true])),
      histControls(),
      h("div", { class: "vl-sd-grid" }, ...poses.map(histCard)));
  }

  function blocksTab(p: any): HTMLElement {
    const t = p.blocks as Table;
    const col = (name: string) => t.column(name);
    const str = (name: string, i: number) => { const c = col(name); return c.kind === "string" ? c.get(i) : String(c.values[i]); };
    const val = (name: string, i: number) => { const c = col(name); return c.kind === "numeric" ? Number(c.values[i]) : NaN; };
    const rows: (string | number)[][] = [];
    let total = 0;
    for (let i = 0; i < t.length; i++) {
      const b = val("estimated_bytes", i);
      if (Number.isFinite(b)) total += b;
      rows.push([str("shard_id", i), str("name", i), str("kind", i), str("dtype", i) || "–", str("shape", i), val("optional", i) ? "yes" : "no", Number.isFinite(b) ? formatBytes(b) : "–"]);
    }
    return h("div", { class: "vl-sd-tab" },
      h("div", { class: "vl-muted" }, `${formatNumber(t.length)} blocks · ${formatBytes(total)} estimated numeric bytes`),
      h("div", { class: "vl-sd-scroll" }, table(["shard", "block", "kind", "dtype", "shape", "optional", "estimated bytes"], rows, [false, false, false, false, false, false, true])));
  }

  function memoryTab(p: any): HTMLElement {
    const mem = p.memory as { component: string; mean_mib: number; median_mib: number; p95_mib: number }[];
    const bb = p.backbone as Record<string, any>[];
    const memChart = mem.length
      ? barChartSvg(mem.map((m) => ({ label: m.component, value: m.mean_mib, text: formatMiB(m.mean_mib), title: `${m.component}: mean ${formatMiB(m.mean_mib)}, median ${formatMiB(m.median_mib)}, p95 ${formatMiB(m.p95_mib)}` })), { width: 360, labelWidth: 120 })
      : h("div", { class: "vl-muted" }, "no memory estimates");
    return h("div", { class: "vl-sd-tab" },
      h("div", { class: "vl-sd-grid" },
        card("Memory per sample (mean)", memChart,
          table(["component", "mean", "median", "p95"], mem.map((m) => [m.component, formatMiB(m.mean_mib), formatMiB(m.median_mib), formatMiB(m.p95_mib)]), [false, true, true, true]))),
      card("Backbone fields",
        bb.length
          ? h("div", { class: "vl-sd-scroll" }, table(["field", "shape", "numel", "rows", "count", "mean", "std", "|mean|", "non-zero"],
            bb.map((b) => [b.field, `[${(b.shape as number[]).join(", ")}]`, num(b.numel), num(b.sampled_rows), num(b.count), num(b.mean), num(b.std), num(b.abs_mean), b.nz_frac === null ? "–" : `${(100 * b.nz_frac).toFixed(1)}%`]),
            [false, false, true, true, true, true, true, true, true]))
          : h("div", { class: "vl-muted" }, "This store has no backbone fields.")));
  }

  function batchTab(p: any): HTMLElement {
    const shapes = p.batch_shapes as { name: string; shape: string }[];
    if (!p.header.batch_shapes_available) {
      return h("div", { class: "vl-sd-tab vl-muted" }, "A labelled batch preview is not available for this store (no scene labels).");
    }
    return h("div", { class: "vl-sd-tab" }, card("One batch from the VinOracleBatch read path",
      shapes.length ? table(["field", "shape"], shapes.map((s) => [s.name, s.shape])) : h("div", { class: "vl-muted" }, "empty")));
  }

  const TAB_RENDER: Record<TabKey, (p: any) => HTMLElement> = {
    overview: overviewTab, components: componentsTab, poses: posesTab, blocks: blocksTab, memory: memoryTab, batch: batchTab,
  };

  function tabBar(): HTMLElement {
    const buttons = TABS.map(([key, label]) => {
      const b = h("button", {
        class: `vl-sd-tabbtn ${ui.tab === key ? "vl-sd-active" : ""}`, type: "button", role: "tab",
        "aria-selected": ui.tab === key ? "true" : "false", tabindex: ui.tab === key ? 0 : -1, "data-tab": key,
      }, h("span", { class: "vl-sd-tablabel", "data-label": label }, label));
      b.addEventListener("click", () => { ui.tab = key; renderBody(); focusTab(); });
      return b;
    });
    const bar = h("div", { class: "vl-sd-tabs", role: "tablist", "aria-label": "Dashboard sections" }, ...buttons);
    bar.addEventListener("keydown", (ev: KeyboardEvent) => {
      const i = TABS.findIndex(([k]) => k === ui.tab);
      let j = i;
      if (ev.key === "ArrowRight") j = (i + 1) % TABS.length;
      else if (ev.key === "ArrowLeft") j = (i - 1 + TABS.length) % TABS.length;
      else if (ev.key === "Home") j = 0;
      else if (ev.key === "End") j = TABS.length - 1;
      else return;
      ev.preventDefault();
      ui.tab = TABS[j][0];
      renderBody();
      focusTab();
    });
    return bar;
  }

  function focusTab() {
    (body.querySelector(`.vl-sd-tabbtn[data-tab="${ui.tab}"]`) as HTMLElement | null)?.focus();
  }

  function disposeScatters() {
    for (const s of scatters) s.dispose();
    scatters = [];
  }

  function renderBody() {
    disposeScatters();
    const raw = model.get("payload");
    if (!raw || !Object.keys(raw).length) {
      const acq = model.get("acquisition");
      replaceChildren(body, h("div", { class: "vl-muted vl-sd-empty" },
        acq?.state === "running" ? "Acquiring store statistics…" : acq?.state === "failed" ? "No statistics: the acquisition failed (see the error above)." : "No statistics yet: press Refresh."));
      pathEl.textContent = model.get("store_path");
      scopeEl.textContent = "";
      return;
    }
    let p: any;
    try {
      p = decode(raw);
    } catch (err) {
      replaceChildren(body, h("div", { class: "vl-error" }, `cannot decode the statistics payload: ${(err as Error).message}`));
      return;
    }
    pathEl.textContent = String(p.header.store_dir);
    scopeEl.textContent = p.header.scan_scope ? `shown: ${String(p.header.scan_scope)}` : "";
    const panel = h("div", { class: "vl-sd-panel", role: "tabpanel" }, TAB_RENDER[ui.tab](p));
    replaceChildren(body, headerSection(p), problemsSection(p), tabBar(), panel);
  }

  const onAcq = () => { renderAcquisition(); if (!Object.keys(model.get("payload") ?? {}).length) renderBody(); };
  const onPayload = () => renderBody();
  const onReplacement = () => renderReplacement();
  model.on("change:acquisition", onAcq);
  model.on("change:payload", onPayload);
  model.on("change:replacement", onReplacement);
  model.on("change:stale", onReplacement);
  model.on("change:max_samples", syncSamples);
  syncSamples();
  renderAcquisition();
  renderReplacement();
  renderBody();

  return () => {
    stopScheme();
    model.off("change:acquisition", onAcq);
    model.off("change:payload", onPayload);
    model.off("change:replacement", onReplacement);
    model.off("change:stale", onReplacement);
    model.off("change:max_samples", syncSamples);
    disposeScatters();
    client.dispose();
    status.dispose();
  };
}

export default { render };
