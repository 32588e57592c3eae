// StoreCompareWidget front end: what changed between two VIN offline stores.
//
// The kernel runs the comparison (both stores scanned, every field counted on the engine's
// shared bins) and publishes progress in `acquisition` and the result in `payload`. The
// ranking of the fields for every metric and each field's display histogram come from the
// engine; this file only chooses which ranking to show and draws. Exports are CSV text the
// kernel writes through vinlens.export. Kernel strings reach the DOM as text only (h(), SVG
// text nodes).
import type { AnyModel, RenderProps } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./store_compare.css";
import { logCountTicks, niceTicks, svg } from "../lib/charts";
import { downloadText, h, replaceChildren } from "../lib/dom";
import { decode, formatNumber, type NDArray, type Table } from "../lib/payload";
import { CommandClient, type CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";
import { setText, VirtualTable } from "../lib/virtual-table";

export const METRICS = [
  ["js_distance", "Jensen-Shannon distance"],
  ["psi", "PSI"],
  ["wasserstein", "Wasserstein"],
  ["ks_statistic", "KS statistic"],
] as const;
export type Metric = (typeof METRICS)[number][0];

export interface Acquisition {
  id: string;
  state: "idle" | "running" | "done" | "failed" | "cancelled";
  step: string;
  done: number;
  total: number;
  unit?: string;
  trigger: string;
  message: string;
}

export interface Problem {
  kind: string;
  shard_id: string;
  block: string;
  path: string;
  message: string;
}

export interface FieldHistogram {
  edges: NDArray;
  a: NDArray;
  b: NDArray;
}

export interface CompareModel {
  store_a_path: string;
  store_b_path: string;
  max_samples: number | null;
  metric: Metric;
  acquisition: Acquisition;
  payload: Record<string, unknown>;
  status: string;
  error: string;
  error_traceback: string;
}

const W = 420;
const H = 200;
const M = { left: 48, right: 8, top: 8, bottom: 30 };

function tick(v: number): string {
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  return formatNumber(Number(v.toPrecision(6)));
}

/** Both stores' counts on the engine's shared display bins, overlaid (A filled, B outlined). */
export function overlaySvg(hist: FieldHistogram, opts: { logY: boolean; label: string }): SVGSVGElement {
  const edges = hist.edges.data;
  const a = hist.a.data;
  const b = hist.b.data;
  const n = a.length;
  const root = svg("svg", {
    class: "vl-chart vl-sc-overlay", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `histograms of store A and store B for ${opts.label}`,
  });
  if (!n) return root;
  let maxCount = 0;
  let totalA = 0;
  let totalB = 0;
  for (let i = 0; i < n; i++) {
    maxCount = Math.max(maxCount, a[i], b[i]);
    totalA += a[i];
    totalB += b[i];
  }
  const yv = (c: number) => (opts.logY ? Math.log10(c + 1) : c);
  const yMax = Math.max(yv(maxCount), 1);
  const x0 = edges[0];
  const x1 = edges[n];
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const sx = (v: number) => M.left + ((v - x0) / (x1 - x0 || 1)) * pw;
  const sy = (v: number) => M.top + ph - (v / yMax) * ph;
  const counts = opts.logY ? logCountTicks(maxCount) : niceTicks(0, yMax, 4).filter((t) => Number.isInteger(t));
  const axes = svg("g", { class: "vl-chart-axes" });
  axes.append(svg("line", { x1: M.left, x2: M.left + pw, y1: M.top + ph, y2: M.top + ph, class: "vl-chart-axis" }));
  axes.append(svg("line", { x1: M.left, x2: M.left, y1: M.top, y2: M.top + ph, class: "vl-chart-axis" }));
  for (const t of niceTicks(x0, x1, 5).filter((v) => v >= x0 && v <= x1)) {
    axes.append(svg("line", { x1: sx(t), x2: sx(t), y1: M.top + ph, y2: M.top + ph + 3, class: "vl-chart-axis" }));
    axes.append(svg("text", { x: sx(t), y: M.top + ph + 13, "text-anchor": "middle", class: "vl-chart-tick" }, tick(t)));
  }
  for (const c of counts) {
    const py = sy(yv(c));
    axes.append(svg("line", { x1: M.left - 3, x2: M.left + pw, y1: py, y2: py, class: "vl-chart-grid" }));
    axes.append(svg("text", { x: M.left - 5, y: py + 3, "text-anchor": "end", class: "vl-chart-tick" }, tick(c)));
  }
  axes.append(svg("text", { x: M.left + pw / 2, y: H - 3, "text-anchor": "middle", class: "vl-chart-label" }, opts.label));
  axes.append(svg("text", {
    x: 10, y: M.top + ph / 2, "text-anchor": "middle", class: "vl-chart-label",
    transform: `rotate(-90 10 ${M.top + ph / 2})`,
  }, opts.logY ? "count (log scale)" : "count"));
  root.append(axes);
  const share = (c: number, total: number) => (total ? ` (${((100 * c) / total).toFixed(1)}%)` : "");
  const barsA = svg("g", { class: "vl-sc-bars-a" });
  const stepB: string[] = [];
  for (let i = 0; i < n; i++) {
    const left = sx(edges[i]);
    const right = sx(edges[i + 1]);
    const range = `[${tick(edges[i])}, ${tick(edges[i + 1])}${i === n - 1 ? "]" : ")"}`;
    const top = sy(yv(a[i]));
    barsA.append(svg("rect", {
      class: "vl-sc-bar-a", x: left, y: top, width: Math.max(0.5, right - left), height: Math.max(0, sy(0) - top),
      "data-count-a": a[i], "data-count-b": b[i],
    }, svg("title", {}, `${range}: A ${formatNumber(a[i])}${share(a[i], totalA)} · B ${formatNumber(b[i])}${share(b[i], totalB)}`)));
    const yb = sy(yv(b[i]));
    stepB.push(`${i === 0 ? "M" : "L"}${left.toFixed(1)},${yb.toFixed(1)}`, `L${right.toFixed(1)},${yb.toFixed(1)}`);
  }
  root.append(barsA, svg("path", { class: "vl-sc-step-b", d: stepB.join(" ") }));
  return root;
}

function num(v: number | null | undefined): string {
  return v === null || v === undefined || Number.isNaN(v) ? "–" : formatNumber(v);
}

/** The order the engine ranked the fields in for `metric` (a copy of its list). */
export function rankedOrder(payload: any, metric: Metric): number[] {
  const order = payload?.rankings?.[metric];
  return Array.isArray(order) ? order.slice() : [];
}

function problemsCard(side: string, problems: Problem[]): HTMLElement {
  if (!problems.length) {
    return h("section", { class: "vl-sc-card vl-sc-problems vl-sc-ok", "aria-label": `Problems of store ${side}` },
      h("h4", {}, `Store ${side}`), h("span", { class: "vl-badge vl-ok" }, "✓"), " No integrity problems found.");
  }
  return h("section", { class: "vl-sc-card vl-sc-problems vl-sc-has-errors", role: "alert", "aria-label": `Problems of store ${side}` },
    h("h4", {}, `Store ${side}: ${problems.length} integrity problem${problems.length === 1 ? "" : "s"}`),
    h("ul", {}, ...problems.map((p) => h("li", { class: "vl-sc-problem" },
      h("strong", {}, p.kind), p.shard_id ? ` shard ${p.shard_id}` : "", p.block ? ` · ${p.block}` : "",
      h("div", { class: "vl-sc-detail" }, p.message)))));
}

function render({ model, el }: RenderProps<CompareModel>): () => void {
  const client = new CommandClient(model as unknown as AnyModel);
  const status = statusView(model as unknown as AnyModel);
  const ui = { selected: -1, logY: false };
  let tables: VirtualTable[] = [];

  const refreshBtn = h("button", { class: "vl-button vl-primary vl-sc-refresh", type: "button", title: "Compare the two stores again" }, "Refresh");
  const cancelBtn = h("button", { class: "vl-button vl-sc-cancel", type: "button", hidden: true }, "Cancel");
  const samplesInput = h("input", {
    class: "vl-input vl-sc-max-samples", type: "number", min: 0, step: 1, placeholder: "all",
    "aria-label": "Rows read from each store (empty: all rows)", title: "Rows read from each store; empty reads every row",
  });
  const metricSel = h("select", { class: "vl-input vl-sc-metric", "aria-label": "Rank fields by" },
    ...METRICS.map(([key, label]) => h("option", { value: key }, label)));
  const logBox = h("input", { type: "checkbox", class: "vl-sc-logy" });
  const pathsEl = h("span", { class: "vl-mono vl-sc-paths" });
  const toolbar = h("div", { class: "vl-toolbar" },
    h("span", { class: "vl-title" }, "Store compare"), pathsEl, h("span", { class: "vl-sc-spacer" }),
    h("label", { class: "vl-muted" }, "rank by ", metricSel),
    h("label", { class: "vl-muted" }, "rows per store ", samplesInput),
    refreshBtn, cancelBtn);
  const stepEl = h("div", { class: "vl-muted vl-sc-step", "aria-live": "polite" });
  const body = h("div", { class: "vl-sc-body" });
  const root = h("div", { class: "vl-root vl-sc" }, toolbar, status.el, stepEl, body);
  const stopScheme = mountRoot(el, root);

  function syncInputs() {
    const v = model.get("max_samples");
    samplesInput.value = v === null || v === undefined ? "" : String(v);
    metricSel.value = model.get("metric") ?? "js_distance";
  }

  refreshBtn.addEventListener("click", () => {
    const raw = samplesInput.value.trim();
    client.request("refresh", { max_samples: raw === "" ? null : Number(raw) }).catch((err: CommandError) => {
      if (!err.cancelled && !model.get("error")) status.showError(err.message, err.traceback);
    });
  });
  cancelBtn.addEventListener("click", () => {
    const id = model.get("acquisition")?.id;
    if (id) client.cancel(id);
  });
  metricSel.addEventListener("change", () => {
    model.set("metric", metricSel.value as Metric);
    model.save_changes();
  });
  logBox.addEventListener("change", () => { ui.logY = logBox.checked; renderBody(); });

  async function exportList(what: string, button: HTMLButtonElement) {
    button.disabled = true;
    try {
      const out = await client.request<{ filename: string; text: string }>("export", { what });
      downloadText(out.filename, out.text);
    } catch (err) {
      const e = err as CommandError;
      if (!e.cancelled) status.showError(e.message, e.traceback);
    } finally {
      button.disabled = false;
    }
  }

  function exportButton(what: string, label: string, enabled: boolean): HTMLButtonElement {
    const b = h("button", { class: "vl-button vl-sc-export", type: "button", "data-what": what, title: `Download ${label} as CSV` }, "Export CSV");
    b.disabled = !enabled;
    b.addEventListener("click", () => { void exportList(what, b); });
    return b;
  }

  function renderAcquisition() {
    const acq = model.get("acquisition") ?? ({} as Acquisition);
    const running = acq.state === "running";
    refreshBtn.disabled = running;
    cancelBtn.hidden = !running;
    if (running) {
      status.progress(acq.done, acq.total, acq.total
        ? `${acq.step}: ${formatNumber(acq.done)} / ${formatNumber(acq.total)} ${acq.unit ?? ""}`.trim()
        : `${acq.step}…`);
      if (!acq.total) status.el.querySelector(".vl-progress")?.removeAttribute("value");
      stepEl.textContent = "";
    } else {
      status.clearProgress();
      stepEl.textContent = acq.state === "cancelled" ? "Comparison cancelled; the results below are unchanged." : "";
    }
    root.classList.toggle("vl-sc-busy", running);
  }

  function summary(p: any): HTMLElement {
    const hd = p.header;
    const splits = Array.from(new Set([...Object.keys(hd.split_counts_a), ...Object.keys(hd.split_counts_b)])).sort();
    const rows = splits.map((s) => h("tr", {}, h("td", {}, s),
      h("td", { class: "vl-num" }, num(hd.split_counts_a[s] ?? 0)), h("td", { class: "vl-num" }, num(hd.split_counts_b[s] ?? 0))));
    const scanned = (n: number, of: number) => (n === of ? formatNumber(n) : `${formatNumber(n)} of ${formatNumber(of)}`);
    return h("section", { class: "vl-sc-summary", "aria-label": "Comparison summary" },
      h("dl", { class: "vl-sc-dl" },
        h("dt", {}, "Store A"), h("dd", { class: "vl-mono" }, String(hd.store_a)),
        h("dt", {}, "Store B"), h("dd", { class: "vl-mono" }, String(hd.store_b)),
        h("dt", {}, "Rows scanned"), h("dd", {}, `A ${scanned(hd.sampled_samples_a, hd.num_samples_a)} · B ${scanned(hd.sampled_samples_b, hd.num_samples_b)}`),
        h("dt", {}, "Binning"), h("dd", {}, `float16 exact · float32 bins ${(100 * hd.float32_relative_resolution).toPrecision(2)}% of |x| wide · PSI over ${hd.psi_bins} A-decile bins, ε ${tick(hd.psi_epsilon)}`)),
      h("table", { class: "vl-table vl-sc-splits" },
        h("thead", {}, h("tr", {}, h("th", {}, "split"), h("th", { class: "vl-num" }, "A"), h("th", { class: "vl-num" }, "B"))),
        h("tbody", {}, ...rows)));
  }

  function fieldsCard(p: any): HTMLElement {
    const t = p.fields as Table;
    const metric = (model.get("metric") ?? "js_distance") as Metric;
    const order = rankedOrder(p, metric);
    if (ui.selected < 0 || !order.includes(ui.selected)) ui.selected = order[0] ?? -1;
    const col = (name: string, i: number): number => {
      const c = t.column(name);
      return c.kind === "numeric" ? Number(c.values[i]) : NaN;
    };
    const text = (name: string, i: number): string => {
      const c = t.column(name);
      return c.kind === "string" ? c.get(i) : String(c.values[i]);
    };
    const columns = [
      { key: "rank", label: "#", minWidth: 44, align: "right" as const, resizable: false },
      { key: "name", label: "field", minWidth: 200, grow: 2 },
      { key: metric, label: METRICS.find(([k]) => k === metric)?.[1] ?? metric, minWidth: 110, align: "right" as const },
      ...METRICS.filter(([k]) => k !== metric).map(([k, label]) => ({ key: k, label, minWidth: 90, align: "right" as const })),
      { key: "count_a", label: "count A", minWidth: 80, align: "right" as const },
      { key: "count_b", label: "count B", minWidth: 80, align: "right" as const },
      { key: "mean_a", label: "mean A", minWidth: 80, align: "right" as const },
      { key: "mean_b", label: "mean B", minWidth: 80, align: "right" as const },
    ];
    const table = new VirtualTable({
      columns, height: 300, label: `Fields ranked by ${metric}`,
      renderCell(row, key, cell) {
        const i = order[row];
        if (key === "rank") setText(cell, String(row + 1));
        else if (key === "name") setText(cell, text("name", i));
        else setText(cell, num(col(key, i)));
      },
      rowClass: (row) => (order[row] === ui.selected ? "vl-sc-selected" : ""),
      rowSelected: (row) => order[row] === ui.selected,
      onRowClick(row) { ui.selected = order[row]; renderDetail(p); table.refresh(); },
      onActivate(row) { ui.selected = order[row]; renderDetail(p); table.refresh(); },
    });
    table.setRowCount(order.length);
    tables.push(table);
    return h("section", { class: "vl-sc-card vl-sc-fields" },
      h("div", { class: "vl-toolbar" }, h("h4", {}, `Fields ranked by ${METRICS.find(([k]) => k === metric)?.[1]}`),
        h("span", { class: "vl-sc-spacer" }), exportButton("fields", "the field table", order.length > 0)),
      table.el);
  }

  const detail = h("section", { class: "vl-sc-card vl-sc-detail-card", "aria-live": "polite" });

  function renderDetail(p: any) {
    const i = ui.selected;
    const t = p.fields as Table;
    if (i < 0 || i >= t.length) { replaceChildren(detail, h("div", { class: "vl-muted" }, "No field selected.")); return; }
    const name = (() => { const c = t.column("name"); return c.kind === "string" ? c.get(i) : ""; })();
    const v = (k: string) => { const c = t.column(k); return c.kind === "numeric" ? Number(c.values[i]) : NaN; };
    const s = (k: string) => { const c = t.column(k); return c.kind === "string" ? c.get(i) : ""; };
    const hist = p.histograms[i] as FieldHistogram;
    const exact = (() => { const c = t.column("exact"); return c.kind === "numeric" && Boolean(c.values[i]); })();
    const chart = hist.a.data.length ? overlaySvg(hist, { logY: ui.logY, label: name }) : h("div", { class: "vl-muted" }, "no values in either store");
    replaceChildren(detail,
      h("div", { class: "vl-toolbar" }, h("h4", { class: "vl-sc-field-name" }, name), h("span", { class: "vl-sc-spacer" }),
        h("span", { class: "vl-sc-legend vl-sc-legend-a" }, "A"), h("span", { class: "vl-sc-legend vl-sc-legend-b" }, "B"),
        h("label", { class: "vl-muted" }, logBox, " log count")),
      chart,
      h("table", { class: "vl-table vl-sc-stats" },
        h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { class: "vl-num" }, "A"), h("th", { class: "vl-num" }, "B"))),
        h("tbody", {},
          h("tr", {}, h("td", {}, "dtype"), h("td", { class: "vl-num" }, s("dtype_a") || "absent"), h("td", { class: "vl-num" }, s("dtype_b") || "absent")),
          h("tr", {}, h("td", {}, "count"), h("td", { class: "vl-num" }, num(v("count_a"))), h("td", { class: "vl-num" }, num(v("count_b")))),
          h("tr", {}, h("td", {}, "mean"), h("td", { class: "vl-num" }, num(v("mean_a"))), h("td", { class: "vl-num" }, num(v("mean_b")))),
          h("tr", {}, h("td", {}, "std"), h("td", { class: "vl-num" }, num(v("std_a"))), h("td", { class: "vl-num" }, num(v("std_b")))))),
      h("div", { class: "vl-muted vl-sc-metrics" },
        METRICS.map(([k, label]) => `${label} ${num(v(k))}`).join(" · "), exact ? " · exact" : " · float32 bins"));
  }

  function listCard(title: string, what: string, keys: Table | string[], count: number): HTMLElement {
    const n = Array.isArray(keys) ? keys.length : keys.length;
    const get = (row: number) => {
      if (Array.isArray(keys)) return keys[row];
      const c = keys.column("key");
      return c.kind === "string" ? c.get(row) : "";
    };
    const head = h("div", { class: "vl-toolbar" }, h("h4", {}, `${title} (${formatNumber(count)})`), h("span", { class: "vl-sc-spacer" }), exportButton(what, title.toLowerCase(), n > 0));
    if (!n) return h("section", { class: "vl-sc-card vl-sc-list", "data-list": what }, head, h("div", { class: "vl-muted" }, "none"));
    const table = new VirtualTable({
      columns: [{ key: "v", label: title, minWidth: 160, grow: 1 }], height: 160, label: title,
      renderCell(row, _key, cell) { setText(cell, get(row)); },
    });
    table.setRowCount(n);
    tables.push(table);
    return h("section", { class: "vl-sc-card vl-sc-list", "data-list": what }, head, table.el);
  }

  function destroyTables() {
    for (const t of tables) t.destroy();
    tables = [];
  }

  function renderBody() {
    destroyTables();
    setText(pathsEl, `${model.get("store_a_path")}  ⇄  ${model.get("store_b_path")}`);
    const raw = model.get("payload");
    if (!raw || !Object.keys(raw).length) {
      const acq = model.get("acquisition");
      replaceChildren(body, h("div", { class: "vl-muted vl-sc-empty" },
        acq?.state === "running" ? "Comparing the stores…" : acq?.state === "failed" ? "No comparison: it failed (see the error above)." : "No comparison yet: press Refresh."));
      return;
    }
    let p: any;
    try {
      p = decode(raw);
    } catch (err) {
      replaceChildren(body, h("div", { class: "vl-error" }, `cannot decode the comparison payload: ${(err as Error).message}`));
      return;
    }
    const fields = fieldsCard(p);
    renderDetail(p);
    replaceChildren(body,
      summary(p),
      h("div", { class: "vl-sc-grid" }, problemsCard("A", p.problems_a as Problem[]), problemsCard("B", p.problems_b as Problem[])),
      h("div", { class: "vl-sc-main" }, fields, detail),
      h("div", { class: "vl-sc-grid vl-sc-lists" },
        listCard("Samples only in A", "samples_only_in_a", p.sample_keys_only_in_a as Table, p.samples_only_in_a),
        listCard("Samples only in B", "samples_only_in_b", p.sample_keys_only_in_b as Table, p.samples_only_in_b),
        listCard("Scenes only in A", "scenes_only_in_a", p.scenes_only_in_a as string[], p.scenes_only_in_a.length),
        listCard("Scenes only in B", "scenes_only_in_b", p.scenes_only_in_b as string[], p.scenes_only_in_b.length)));
    for (const t of tables) t.refresh();
  }

  const onAcq = () => { renderAcquisition(); if (!Object.keys(model.get("payload") ?? {}).length) renderBody(); };
  const onPayload = () => { ui.selected = -1; renderBody(); };
  // A new ranking starts at its own top field.
  const onMetric = () => { ui.selected = -1; syncInputs(); renderBody(); };
  model.on("change:acquisition", onAcq);
  model.on("change:payload", onPayload);
  model.on("change:metric", onMetric);
  model.on("change:max_samples", syncInputs);
  syncInputs();
  renderAcquisition();
  renderBody();

  return () => {
    stopScheme();
    model.off("change:acquisition", onAcq);
    model.off("change:payload", onPayload);
    model.off("change:metric", onMetric);
    model.off("change:max_samples", syncInputs);
    destroyTables();
    client.dispose();
    status.dispose();
  };
}

export default { render };
