// A virtualized table: fixed row height, only the rows in view (plus a little overscan)
// exist in the DOM, so 50,000 rows cost what 40 do. The table knows nothing about the
// data: callers give a row count and fill cells through `renderCell`, and hear about
// clicks, keys and header sorting through callbacks. Text only (see dom.ts).
import { h } from "./dom";
import "./virtual-table.css";

export interface VTColumn {
  key: string;
  label: string;
  /** Minimum width in px; the column also grows by `grow` shares of the spare width. */
  minWidth: number;
  grow?: number;
  align?: "left" | "right";
  sortable?: boolean;
  title?: string;
  /** Let the user drag the header's right edge to change the width (default true). */
  resizable?: boolean;
}

export type SortDir = "asc" | "desc";

export interface VTOptions {
  columns: VTColumn[];
  rowHeight?: number;
  /** Largest viewport height in px (rows scroll inside it). */
  height?: number;
  /** Shrink the viewport to the rows when they need less than `height` (default true). */
  fitRows?: boolean;
  overscan?: number;
  label?: string;
  /** Fill one cell of view row `row`; `cell` is reused between rows, so set everything. */
  renderCell(row: number, key: string, cell: HTMLElement): void;
  rowClass?(row: number): string;
  rowSelected?(row: number): boolean;
  onRowClick?(row: number, ev: MouseEvent): void;
  /** Enter / Space on the cursor row. */
  onActivate?(row: number, ev: KeyboardEvent): void;
  /** The keyboard cursor moved (arrows, page, home/end); `ev.shiftKey` extends selections. */
  onCursorMove?(row: number, previous: number, ev: KeyboardEvent): void;
  /** Other keys on the focused table (e.g. ArrowLeft/Right to collapse); true if handled. */
  onKey?(row: number, ev: KeyboardEvent): boolean;
  onSort?(key: string): void;
}

let tableCounter = 0;

/** Set `el`'s text only when it differs: an unchanged cell then costs no layout. */
export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export class VirtualTable {
  readonly el: HTMLElement;
  readonly viewport: HTMLElement;
  readonly rowHeight: number;
  private readonly spacer: HTMLElement;
  private readonly header: HTMLElement;
  private readonly headerCells = new Map<string, HTMLElement>();
  /** Width in px a column was fitted or dragged to; null: min width plus its grow share. */
  private readonly widths: (number | null)[];
  /** Columns whose width was fitted to content: they still take their share of spare width. */
  private readonly fitted: boolean[];
  private resizeCleanup: (() => void) | null = null;
  private readonly pool: HTMLElement[] = [];
  private readonly poolRow: number[] = [];
  /** Class string last written to each pool row: an unchanged row is not restyled. */
  private readonly poolClass: string[] = [];
  /** Viewport height from a ResizeObserver, so scrolling never reads layout for it. */
  private observedHeight = 0;
  private readonly resizeObserver: ResizeObserver | null = null;
  private readonly idPrefix: string;
  private rows = 0;
  private cursorRow = -1;
  private first = 0;
  private last = 0;
  private height: number;
  private readonly overscan: number;
  private readonly onScroll = () => this.render(false);

  constructor(private readonly opts: VTOptions) {
    this.rowHeight = opts.rowHeight ?? 24;
    this.height = opts.height ?? 360;
    this.overscan = opts.overscan ?? 6;
    this.idPrefix = `vl-vt-${++tableCounter}`;
    this.widths = opts.columns.map(() => null);
    this.fitted = opts.columns.map(() => false);

    this.header = h("div", { class: "vl-vt-header", role: "row" });
    opts.columns.forEach((col, c) => {
      const cls = `vl-vt-cell vl-vt-hcell${col.align === "right" ? " vl-vt-right" : ""}`;
      // The full label on hover too: a narrow column may still ellipsize it.
      const title = col.title ? `${col.label}: ${col.title}` : col.label;
      const cell = h("div", { class: cls, role: "columnheader", "data-key": col.key, title });
      if (col.sortable && opts.onSort) {
        cell.append(h("button", {
          class: "vl-vt-sort", type: "button",
          onclick: () => opts.onSort?.(col.key),
        }, col.label, h("span", { class: "vl-vt-sort-mark", "aria-hidden": "true" })));
      } else {
        cell.append(h("span", { class: "vl-vt-hlabel" }, col.label));
      }
      if (col.resizable !== false) {
        const grip = h("span", {
          class: "vl-vt-resizer", role: "separator", "aria-orientation": "vertical",
          "aria-label": `Resize column ${col.label}`, title: "Drag to resize",
        });
        grip.addEventListener("pointerdown", (ev) => this.startResize(c, cell, ev));
        cell.append(grip);
      }
      this.headerCells.set(col.key, cell);
      this.header.append(cell);
    });
    this.spacer = h("div", { class: "vl-vt-spacer", role: "rowgroup" });
    this.viewport = h("div", {
      class: "vl-vt-viewport", tabindex: 0, role: "grid",
      "aria-label": opts.label ?? "table", "aria-multiselectable": "true",
    }, this.header, this.spacer);
    this.viewport.style.height = `${this.height}px`;
    this.el = h("div", { class: "vl-vt" }, this.viewport);
    this.applyWidths();
    this.el.style.setProperty("--vl-vt-row-height", `${this.rowHeight}px`);

    this.viewport.addEventListener("scroll", this.onScroll, { passive: true });
    if (typeof ResizeObserver !== "undefined") {
      this.resizeObserver = new ResizeObserver((entries) => {
        const height = entries[entries.length - 1]?.contentRect.height ?? 0;
        if (height === this.observedHeight) return;
        this.observedHeight = height;
        this.render(false); // taller: more rows to show
      });
      this.resizeObserver.observe(this.viewport);
    }
    this.viewport.addEventListener("click", (ev) => this.handleClick(ev));
    this.viewport.addEventListener("keydown", (ev) => this.handleKey(ev));
  }

  get rowCount(): number {
    return this.rows;
  }

  get cursor(): number {
    return this.cursorRow;
  }

  /** Change the number of rows (e.g. after filtering) and repaint. */
  setRowCount(n: number): void {
    this.rows = Math.max(0, n | 0);
    this.spacer.style.height = `${this.rows * this.rowHeight}px`;
    this.applyHeight();
    this.viewport.setAttribute("aria-rowcount", String(this.rows + 1));
    if (this.cursorRow >= this.rows) this.cursorRow = this.rows - 1;
    this.refresh();
  }

  setHeight(px: number): void {
    this.height = px;
    this.applyHeight();
    this.refresh();
  }

  private applyHeight(): void {
    // header row + rows + borders; an empty table keeps room for a few rows
    const fitted = (Math.max(this.rows, 3) + 1) * this.rowHeight + 4;
    const px = this.opts.fitRows === false ? this.height : Math.min(this.height, fitted);
    this.viewport.style.height = `${px}px`;
  }

  /** Repaint every row in view (data or selection changed). */
  refresh(): void {
    this.render(true);
  }

  /** Show the sort direction on a header (null: unsorted). */
  setSort(key: string | null, dir: SortDir = "asc"): void {
    for (const [k, cell] of this.headerCells) {
      const active = k === key;
      cell.setAttribute("aria-sort", active ? (dir === "asc" ? "ascending" : "descending") : "none");
      const mark = cell.querySelector(".vl-vt-sort-mark");
      if (mark) mark.textContent = active ? (dir === "asc" ? " ▲" : " ▼") : "";
    }
  }

  /** First and last (exclusive) view rows currently in the DOM. */
  renderedRange(): [number, number] {
    return [this.first, this.last];
  }

  setCursor(row: number, scroll = true): void {
    if (this.rows === 0) {
      this.cursorRow = -1;
      return;
    }
    this.cursorRow = Math.min(Math.max(row, 0), this.rows - 1);
    if (scroll) this.scrollToRow(this.cursorRow);
    this.refresh();
  }

  /** Scroll the least needed so that `row` is fully visible. */
  scrollToRow(row: number): void {
    const vh = this.viewportHeight() - this.rowHeight; // the sticky header covers one row
    const top = row * this.rowHeight;
    const scrollTop = this.viewport.scrollTop;
    if (top < scrollTop) this.viewport.scrollTop = top;
    else if (top + this.rowHeight > scrollTop + vh) this.viewport.scrollTop = top + this.rowHeight - vh;
    this.render(false);
  }

  /** Smallest width in px a column gets: its min width, and never less than its header label. */
  static columnFloor(col: VTColumn): number {
    // ~8.2 px per character of a 13 px bold UI font, plus padding, resize grip and sort mark.
    return Math.max(col.minWidth, Math.ceil(col.label.length * 8.2) + (col.sortable ? 32 : 22));
  }

  /** Fix column `key` at `px` (at least its floor); null returns it to min width + grow. */
  setColumnWidth(key: string, px: number | null): void {
    const c = this.opts.columns.findIndex((col) => col.key === key);
    if (c < 0) return;
    this.widths[c] = px === null ? null : Math.max(Math.round(px), 40);
    this.fitted[c] = false;
    this.applyWidths();
  }

  columnWidth(key: string): number | null {
    const c = this.opts.columns.findIndex((col) => col.key === key);
    return c < 0 ? null : this.widths[c];
  }

  /**
   * Size column `key` to show `longest` (the longest text of its cells) in full, up to
   * `max` px; never narrower than the column's floor.
   */
  fitColumn(key: string, longest: string, max = 480): void {
    const col = this.opts.columns.find((c) => c.key === key);
    if (!col) return;
    const px = this.measureText(longest) + 18; // cell padding + a little air
    this.setColumnWidth(key, Math.min(max, Math.max(VirtualTable.columnFloor(col), px)));
    this.fitted[this.opts.columns.indexOf(col)] = true;
    this.applyWidths();
  }

  private measureText(text: string): number {
    const probe = h("span", { class: "vl-vt-measure" }, text);
    this.spacer.append(probe);
    const px = probe.getBoundingClientRect().width;
    probe.remove();
    // Not laid out (detached, or jsdom): estimate from the length.
    return px > 0 ? px : text.length * 7;
  }

  private applyWidths(): void {
    const cols = this.opts.columns;
    const tracks = cols.map((col, c) => {
      const w = this.widths[c];
      if (w === null) return `minmax(${VirtualTable.columnFloor(col)}px, ${col.grow ?? 0}fr)`;
      return this.fitted[c] ? `minmax(${w}px, ${col.grow ?? 0}fr)` : `${w}px`;
    }).join(" ");
    const minWidth = cols.reduce((sum, col, c) => sum + (this.widths[c] ?? VirtualTable.columnFloor(col)), 0);
    this.el.style.setProperty("--vl-vt-cols", tracks);
    this.el.style.setProperty("--vl-vt-min-width", `${minWidth}px`);
  }

  private startResize(c: number, cell: HTMLElement, ev: PointerEvent): void {
    ev.preventDefault();
    ev.stopPropagation();
    this.resizeCleanup?.();
    const startX = ev.clientX;
    const start = cell.getBoundingClientRect().width || this.widths[c] || VirtualTable.columnFloor(this.opts.columns[c]);
    const move = (e: PointerEvent) => {
      this.widths[c] = Math.max(40, Math.round(start + e.clientX - startX));
      this.fitted[c] = false;
      this.applyWidths();
    };
    const up = () => this.resizeCleanup?.();
    const doc = cell.ownerDocument;
    doc.addEventListener("pointermove", move);
    doc.addEventListener("pointerup", up);
    doc.addEventListener("pointercancel", up);
    this.resizeCleanup = () => {
      doc.removeEventListener("pointermove", move);
      doc.removeEventListener("pointerup", up);
      doc.removeEventListener("pointercancel", up);
      this.resizeCleanup = null;
    };
  }

  destroy(): void {
    this.resizeCleanup?.();
    this.resizeObserver?.disconnect();
    this.viewport.removeEventListener("scroll", this.onScroll);
    this.el.remove();
  }

  private viewportHeight(): number {
    if (this.observedHeight > 0) return this.observedHeight;
    return this.viewport.clientHeight || parseFloat(this.viewport.style.height) || this.height;
  }

  private render(force: boolean): void {
    const rh = this.rowHeight;
    const top = this.viewport.scrollTop;
    const visible = Math.ceil(this.viewportHeight() / rh) + 1;
    const first = Math.max(0, Math.floor(top / rh) - this.overscan);
    const last = Math.min(this.rows, first + visible + 2 * this.overscan);
    // An even pool keeps each slot on rows of one parity, so the striping class of a
    // recycled row never changes while scrolling.
    const needed = (visible + 2 * this.overscan + 1) & ~1;
    while (this.pool.length < needed) this.addPoolRow();
    if (!force && first === this.first && last === this.last) return;
    this.first = first;
    this.last = last;
    const size = this.pool.length;
    const shown = new Set<number>();
    for (let row = first; row < last; row++) {
      const slot = row % size;
      shown.add(slot);
      if (force || this.poolRow[slot] !== row || this.pool[slot].hidden) this.paintRow(slot, row);
    }
    for (let slot = 0; slot < size; slot++) {
      if (!shown.has(slot) && !this.pool[slot].hidden) {
        this.pool[slot].hidden = true;
        this.poolRow[slot] = -1;
      }
    }
    const cursorEl = this.cursorRow >= first && this.cursorRow < last ? this.pool[this.cursorRow % size] : null;
    if (cursorEl) this.viewport.setAttribute("aria-activedescendant", cursorEl.id);
    else this.viewport.removeAttribute("aria-activedescendant");
  }

  private addPoolRow(): void {
    const row = h("div", { class: "vl-vt-row", role: "row", id: `${this.idPrefix}-${this.pool.length}`, hidden: true });
    for (const col of this.opts.columns) {
      row.append(h("div", {
        class: `vl-vt-cell${col.align === "right" ? " vl-vt-right" : ""}`,
        role: "gridcell", "data-key": col.key,
      }));
    }
    row.style.height = `${this.rowHeight}px`;
    this.pool.push(row);
    this.poolRow.push(-1);
    this.poolClass.push("");
    this.spacer.append(row);
  }

  private paintRow(slot: number, row: number): void {
    const el = this.pool[slot];
    this.poolRow[slot] = row;
    el.hidden = false;
    el.style.transform = `translateY(${row * this.rowHeight}px)`;
    el.dataset.row = String(row);
    el.setAttribute("aria-rowindex", String(row + 2));
    const selected = this.opts.rowSelected?.(row) ?? false;
    el.setAttribute("aria-selected", selected ? "true" : "false");
    let cls = "vl-vt-row";
    if (selected) cls += " vl-selected";
    if (row === this.cursorRow) cls += " vl-vt-cursor";
    if (row % 2 === 1) cls += " vl-vt-odd";
    const extra = this.opts.rowClass?.(row);
    if (extra) cls += ` ${extra}`;
    if (this.poolClass[slot] !== cls) {
      el.className = cls;
      this.poolClass[slot] = cls;
    }
    const cells = el.children;
    for (let c = 0; c < this.opts.columns.length; c++) {
      this.opts.renderCell(row, this.opts.columns[c].key, cells[c] as HTMLElement);
    }
  }

  private rowOf(target: EventTarget | null): number {
    const el = (target as Element | null)?.closest?.(".vl-vt-row") as HTMLElement | null;
    if (!el || !this.spacer.contains(el)) return -1;
    const row = Number(el.dataset.row);
    return Number.isInteger(row) && row >= 0 && row < this.rows ? row : -1;
  }

  private handleClick(ev: MouseEvent): void {
    const row = this.rowOf(ev.target);
    if (row < 0) return;
    this.cursorRow = row;
    this.opts.onRowClick?.(row, ev);
    this.refresh();
  }

  private handleKey(ev: KeyboardEvent): void {
    if (ev.target !== this.viewport) return; // keys inside header buttons keep their meaning
    const page = Math.max(1, Math.floor(this.viewportHeight() / this.rowHeight) - 2);
    const current = this.cursorRow;
    let next: number | null = null;
    switch (ev.key) {
      case "ArrowDown": next = current + 1; break;
      case "ArrowUp": next = current < 0 ? 0 : current - 1; break;
      case "PageDown": next = current + page; break;
      case "PageUp": next = current - page; break;
      case "Home": next = 0; break;
      case "End": next = this.rows - 1; break;
      case "Enter":
      case " ":
        if (current >= 0) {
          ev.preventDefault();
          this.opts.onActivate?.(current, ev);
          this.refresh();
        }
        return;
      default:
        if (current >= 0 && this.opts.onKey?.(current, ev)) ev.preventDefault();
        return;
    }
    if (this.rows === 0) return;
    ev.preventDefault();
    next = Math.min(Math.max(next, 0), this.rows - 1);
    this.cursorRow = next;
    this.scrollToRow(next);
    this.opts.onCursorMove?.(next, current, ev);
    this.refresh();
  }
}
