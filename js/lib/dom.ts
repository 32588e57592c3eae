// DOM helpers that only ever insert text: nothing from the kernel goes through innerHTML.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/** Create an element; string children become text nodes, `on*` attrs become listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, attrs: Attrs = {}, ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
    } else if (key === "class") {
      el.className = String(value);
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, ...children);
  return el;
}

export function append(el: Element, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace all children of `el`. */
export function replaceChildren(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

/** Trigger a browser download of text content (e.g. CSV) without a server round trip. */
export function downloadText(filename: string, text: string, mime = "text/csv"): void {
  const url = URL.createObjectURL(new Blob([text], { type: `${mime};charset=utf-8` }));
  const a = h("a", { href: url, download: filename, style: "display:none" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** CSV field quoting per RFC 4180; also neutralises spreadsheet formula injection. */
export function csvField(value: unknown): string {
  let s = value === null || value === undefined ? "" : String(value);
  if (/^[=+\-@\t\r]/.test(s) && !/^-?[\d.]+(e[+-]?\d+)?$/i.test(s)) s = `'${s}`;
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** The part after the last dot: `torch.nn.Linear` -> `Linear`, `encoder.blocks.0` -> `0`. */
export function lastDotted(name: string): string {
  const dot = name.lastIndexOf(".");
  return dot >= 0 ? name.slice(dot + 1) : name;
}

export interface CollapsedListOptions {
  /** Items shown before "show all" (default 5). */
  limit?: number;
  /** How many items exist in all, when `items` is only the first of them (the kernel caps lists). */
  total?: number;
  /** Class of the list element (e.g. "vl-mono"). */
  listClass?: string;
  /** What the items are, for the toggle's accessible label ("unpaired sample keys"). */
  what?: string;
}

/**
 * A long list shown as its first few items and a "show all" toggle, one item per line,
 * so 32 sample keys neither fill a card nor run together with commas.
 */
export function collapsedList(items: readonly string[], opts: CollapsedListOptions = {}): HTMLElement {
  const limit = Math.max(1, opts.limit ?? 5);
  const total = Math.max(opts.total ?? items.length, items.length);
  const list = h("ul", { class: `vl-collapsed-list ${opts.listClass ?? ""}`.trim() });
  const root = h("div", { class: "vl-collapsed" }, list);
  const hidden = total - items.length;
  const note = hidden > 0 ? h("li", { class: "vl-muted vl-collapsed-more" }, `… and ${hidden} more not listed`) : null;
  let expanded = false;
  const toggle = items.length > limit
    ? h("button", { class: "vl-button vl-collapsed-toggle", type: "button", "aria-expanded": "false" })
    : null;
  const paint = () => {
    const shown = expanded ? items : items.slice(0, limit);
    replaceChildren(list, ...shown.map((s) => h("li", {}, s)), expanded || !toggle ? note : null);
    if (toggle) {
      toggle.textContent = expanded ? "show fewer" : `show all ${items.length}`;
      toggle.setAttribute("aria-expanded", String(expanded));
      toggle.setAttribute("aria-label", `${expanded ? "Show fewer" : "Show all"} ${opts.what ?? "items"}`);
    }
  };
  if (toggle) {
    toggle.addEventListener("click", () => { expanded = !expanded; paint(); });
    root.append(toggle);
  }
  paint();
  return root;
}
