// Config tree: the records of inspect_config (vinlens/widgets/config_tree.py) as a
// collapsible, searchable tree. Records arrive in depth-first pre-order, so the tree is a
// flat list of rows with aria-level; a row is shown when all its ancestors are expanded,
// or, while searching, when it or a descendant matches.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./config_tree.css";
import { h, lastDotted, replaceChildren } from "../lib/dom";
import { CommandClient } from "../lib/protocol";
import { statusView } from "../lib/status";

export interface ConfigField {
  path: string[];
  declared_type: string;
  configured_type: string;
  value: unknown;
  value_kind: "none" | "bool" | "number" | "string" | "enum" | "marker";
  value_text: string;
}

export interface ConfigTreeModel {
  spec: { config_type?: string; target_type?: string | null; fields?: ConfigField[] };
  query: string;
  status: string;
  error: string;
  error_traceback: string;
}

/** `text` as text nodes with every case-insensitive occurrence of `q` in a <mark>. */
export function highlight(text: string, q: string): (Node | string)[] {
  if (!q) return [text];
  const out: (Node | string)[] = [];
  const lower = text.toLowerCase();
  let at = 0;
  for (let i = lower.indexOf(q); i >= 0; i = lower.indexOf(q, at)) {
    if (i > at) out.push(text.slice(at, i));
    out.push(h("mark", { class: "vl-ct-mark" }, text.slice(i, i + q.length)));
    at = i + q.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function render({ model, el }: { model: AnyModel<ConfigTreeModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  const client = new CommandClient(model);
  const search = h("input", {
    class: "vl-input vl-ct-search", type: "search", placeholder: "Search fields, values, types…",
    "aria-label": "Search configuration fields",
  });
  const expandAll = h("button", { class: "vl-button vl-ct-expand-all", type: "button" }, "Expand all");
  const collapseAll = h("button", { class: "vl-button vl-ct-collapse-all", type: "button" }, "Collapse all");
  const refresh = h("button", { class: "vl-button vl-ct-refresh", type: "button", title: "Re-inspect the configuration" }, "Refresh");
  const count = h("span", { class: "vl-muted vl-ct-count", "aria-live": "polite" });
  const header = h("div", { class: "vl-ct-header" });
  const tree = h("div", { class: "vl-ct-tree", role: "tree", "aria-label": "Configuration fields" });
  const columns = h("div", { class: "vl-ct-columns", "aria-hidden": "true" },
    h("span", {}, "Field"), h("span", {}, "Value"), h("span", {}, "Declared type"), h("span", {}, "Configured type"));
  const root = h("div", { class: "vl-root vl-config-tree" },
    h("div", { class: "vl-toolbar" }, h("span", { class: "vl-title" }, "Configuration"), search, expandAll, collapseAll, refresh, count),
    header, columns, tree, status.el);
  const stopScheme = mountRoot(el, root);

  let nodes: InternalNode[] = [];
  let expanded = new Uint8Array(0);
  let active = -1;
  let query = "";

  interface InternalNode {
    field: ConfigField;
    parent: number;
    depth: number;
    hasChildren: boolean;
    haystack: string;
    row: HTMLElement;
    twisty: HTMLElement;
    name: HTMLElement;
    value: HTMLElement;
  }

  function build(): void {
    const spec = model.get("spec") ?? {};
    const fields = spec.fields ?? [];
    replaceChildren(header,
      h("span", { class: "vl-ct-config-type vl-mono", title: spec.config_type ?? "" }, spec.config_type ?? ""),
      spec.target_type
        ? h("span", { class: "vl-ct-target" }, h("span", { class: "vl-muted" }, " builds "),
          h("span", { class: "vl-mono vl-ct-target-type", title: "target_type (not constructed)" }, spec.target_type))
        : h("span", { class: "vl-muted vl-ct-target" }, " (no target_type)"));
    const byPath = new Map<string, number>();
    nodes = fields.map((field, i) => {
      const key = field.path.join("\u0000");
      byPath.set(key, i);
      const parent = byPath.get(field.path.slice(0, -1).join("\u0000")) ?? -1;
      const depth = field.path.length - 1;
      const twisty = h("span", { class: "vl-ct-twisty", "aria-hidden": "true" });
      const name = h("span", { class: "vl-ct-name vl-mono" });
      const value = h("span", { class: `vl-ct-value vl-mono vl-ct-${field.value_kind}`, title: field.value_text });
      const row = h("div", {
        class: "vl-ct-row", role: "treeitem", tabindex: -1, "aria-level": depth + 1, "data-index": i,
        title: field.path.join("."),
      },
      h("span", { class: "vl-ct-cell vl-ct-name-cell" }, twisty, name),
      value,
      h("span", { class: "vl-ct-declared vl-mono vl-muted", title: field.declared_type }, field.declared_type),
      h("span", { class: "vl-ct-configured vl-mono vl-muted", title: field.configured_type }, lastDotted(field.configured_type)));
      row.style.setProperty("--vl-ct-depth", String(depth));
      const haystack = [field.path.join("."), field.value_text, field.declared_type, field.configured_type].join("\n").toLowerCase();
      return { field, parent, depth, hasChildren: false, haystack, row, twisty, name, value };
    });
    for (const n of nodes) if (n.parent >= 0) nodes[n.parent].hasChildren = true;
    expanded = new Uint8Array(nodes.length);
    // Top-level structure open, deeper levels closed: a big config stays readable.
    nodes.forEach((n, i) => { if (n.depth === 0) expanded[i] = 1; });
    replaceChildren(tree, ...nodes.map((n) => n.row));
    if (nodes.length === 0) tree.append(h("div", { class: "vl-muted vl-ct-empty" }, "This configuration has no fields."));
    active = nodes.length ? 0 : -1;
    update();
  }

  /** Show/hide rows and paint names for the current expansion and search. */
  function update(): void {
    const n = nodes.length;
    let keep: Uint8Array | null = null;
    let matches = 0;
    if (query) {
      keep = new Uint8Array(n);
      for (let i = n - 1; i >= 0; i--) {
        if (nodes[i].haystack.includes(query)) { keep[i] = 1; matches++; }
        if (keep[i] && nodes[i].parent >= 0) keep[nodes[i].parent] = 1;
      }
    }
    const visible = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const node = nodes[i];
      const p = node.parent;
      visible[i] = keep ? keep[i] : (p < 0 || (visible[p] && expanded[p])) ? 1 : 0;
      node.row.hidden = !visible[i];
      const open = keep ? true : expanded[i] === 1;
      if (node.hasChildren) node.row.setAttribute("aria-expanded", open ? "true" : "false");
      node.twisty.textContent = node.hasChildren ? (open ? "▾" : "▸") : "";
      const label = node.field.path[node.field.path.length - 1] ?? "";
      const isIndex = /^\d+$/.test(label);
      replaceChildren(node.name, ...highlight(isIndex ? `[${label}]` : label, query));
      replaceChildren(node.value, ...highlight(node.field.value_text, query));
      node.row.classList.toggle("vl-ct-match", !!keep && node.haystack.includes(query));
    }
    if (active >= 0 && !visible[active]) active = nodes.findIndex((_, i) => visible[i]);
    nodes.forEach((node, i) => node.row.setAttribute("tabindex", i === active ? "0" : "-1"));
    count.textContent = query ? `${matches} of ${n} fields match` : `${n} fields`;
  }

  function visibleRows(): number[] {
    const out: number[] = [];
    nodes.forEach((n, i) => { if (!n.row.hidden) out.push(i); });
    return out;
  }

  function focusRow(i: number): void {
    if (i < 0 || i >= nodes.length) return;
    active = i;
    nodes.forEach((node, j) => node.row.setAttribute("tabindex", j === i ? "0" : "-1"));
    nodes[i].row.focus();
  }

  function toggle(i: number, open?: boolean): void {
    if (!nodes[i]?.hasChildren || query) return;
    expanded[i] = (open ?? !expanded[i]) ? 1 : 0;
    update();
  }

  tree.addEventListener("click", (ev) => {
    const row = (ev.target as Element).closest(".vl-ct-row") as HTMLElement | null;
    if (!row) return;
    const i = Number(row.dataset.index);
    toggle(i);
    focusRow(i);
  });
  tree.addEventListener("keydown", (ev) => {
    const rows = visibleRows();
    const pos = rows.indexOf(active);
    const node = nodes[active];
    let handled = true;
    switch (ev.key) {
      case "ArrowDown": focusRow(rows[Math.min(pos + 1, rows.length - 1)]); break;
      case "ArrowUp": focusRow(rows[Math.max(pos - 1, 0)]); break;
      case "Home": focusRow(rows[0]); break;
      case "End": focusRow(rows[rows.length - 1]); break;
      case "ArrowRight":
        if (node?.hasChildren && !expanded[active]) toggle(active, true);
        else if (node?.hasChildren) focusRow(rows[pos + 1]);
        break;
      case "ArrowLeft":
        if (node?.hasChildren && expanded[active] && !query) toggle(active, false);
        else if (node && node.parent >= 0) focusRow(node.parent);
        break;
      case "Enter":
      case " ":
        toggle(active);
        break;
      default:
        handled = false;
    }
    if (handled) ev.preventDefault();
  });
  search.addEventListener("input", () => {
    query = search.value.trim().toLowerCase();
    model.set("query", search.value);
    model.save_changes();
    update();
  });
  expandAll.addEventListener("click", () => { expanded.fill(1); update(); });
  collapseAll.addEventListener("click", () => { expanded.fill(0); update(); });
  refresh.addEventListener("click", () => {
    refresh.disabled = true;
    client.request("refresh").catch((err) => status.showError(err.message, err.traceback))
      .finally(() => { refresh.disabled = false; });
  });

  const onSpec = () => build();
  const onQuery = () => {
    const q = model.get("query") ?? "";
    if (q !== search.value) { search.value = q; query = q.trim().toLowerCase(); update(); }
  };
  model.on("change:spec", onSpec);
  model.on("change:query", onQuery);
  search.value = model.get("query") ?? "";
  query = search.value.trim().toLowerCase();
  build();

  return () => {
    stopScheme();
    model.off("change:spec", onSpec);
    model.off("change:query", onQuery);
    client.dispose();
    status.dispose();
    root.remove();
  };
}

export default { render };
