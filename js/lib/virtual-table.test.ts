import { describe, expect, it, vi } from "vitest";
import { VirtualTable } from "./virtual-table";

function makeTable(n: number, extra: Partial<ConstructorParameters<typeof VirtualTable>[0]> = {}) {
  const painted: number[] = [];
  const table = new VirtualTable({
    columns: [
      { key: "name", label: "Name", minWidth: 100, grow: 1, sortable: true },
      { key: "n", label: "N", minWidth: 60, align: "right" },
    ],
    rowHeight: 20,
    height: 200,
    overscan: 2,
    renderCell(row, key, cell) {
      if (key === "name") painted.push(row);
      cell.textContent = key === "name" ? `row ${row}` : String(row * 2);
    },
    ...extra,
  });
  document.body.append(table.el);
  table.setRowCount(n);
  return { table, painted };
}

function scrollTo(table: VirtualTable, top: number) {
  Object.defineProperty(table.viewport, "scrollTop", { value: top, configurable: true, writable: true });
  table.viewport.dispatchEvent(new Event("scroll"));
}

function shownRows(table: VirtualTable): number[] {
  return Array.from(table.el.querySelectorAll<HTMLElement>(".vl-vt-row:not([hidden])"))
    .map((r) => Number(r.dataset.row)).sort((a, b) => a - b);
}

describe("VirtualTable", () => {
  it("keeps only the rows in view (plus overscan) in the DOM at 50,000 rows", () => {
    const { table } = makeTable(50_000);
    const rows = shownRows(table);
    expect(rows[0]).toBe(0);
    expect(rows.length).toBeLessThan(30);
    expect(table.el.querySelectorAll(".vl-vt-row").length).toBeLessThan(30);
    expect((table.el.querySelector(".vl-vt-spacer") as HTMLElement).style.height).toBe(`${50_000 * 20}px`);
    scrollTo(table, 20 * 40_000);
    const after = shownRows(table);
    expect(after[0]).toBeGreaterThanOrEqual(39_995);
    expect(after).toContain(40_005);
    expect(table.el.querySelectorAll(".vl-vt-row").length).toBeLessThan(30);
    const cell = table.el.querySelector<HTMLElement>('.vl-vt-row[data-row="40003"] [data-key="n"]');
    expect(cell?.textContent).toBe("80006");
    expect(cell?.parentElement?.style.transform).toBe(`translateY(${40003 * 20}px)`);
  });

  it("repaints only rows that scrolled into view", () => {
    const { table, painted } = makeTable(1000);
    painted.length = 0;
    scrollTo(table, 20 * 3);
    // moving 3 rows paints about 3 new rows, not the whole window
    expect(painted.length).toBeLessThanOrEqual(4);
    painted.length = 0;
    scrollTo(table, 20 * 3 + 5); // same first row: nothing to paint
    expect(painted).toEqual([]);
  });

  it("moves a keyboard cursor, activates rows and reports clicks", () => {
    const onActivate = vi.fn();
    const onCursorMove = vi.fn();
    const onRowClick = vi.fn();
    const { table } = makeTable(100, { onActivate, onCursorMove, onRowClick });
    const key = (k: string, shiftKey = false) =>
      table.viewport.dispatchEvent(new KeyboardEvent("keydown", { key: k, shiftKey, bubbles: true }));
    key("ArrowDown");
    expect(table.cursor).toBe(0);
    key("ArrowDown", true);
    expect(table.cursor).toBe(1);
    expect(onCursorMove).toHaveBeenLastCalledWith(1, 0, expect.objectContaining({ shiftKey: true }));
    key("End");
    expect(table.cursor).toBe(99);
    expect(shownRows(table)).toContain(99); // scrolled to it
    key("Enter");
    expect(onActivate).toHaveBeenCalledWith(99, expect.anything());
    const cursorRow = table.el.querySelector(".vl-vt-cursor") as HTMLElement;
    expect(cursorRow.dataset.row).toBe("99");
    expect(table.viewport.getAttribute("aria-activedescendant")).toBe(cursorRow.id);
    key("Home");
    const first = table.el.querySelector('.vl-vt-row[data-row="0"] [data-key="name"]') as HTMLElement;
    first.dispatchEvent(new MouseEvent("click", { bubbles: true, shiftKey: true }));
    expect(onRowClick).toHaveBeenCalledWith(0, expect.objectContaining({ shiftKey: true }));
  });

  it("sorts through header buttons and shows the direction", () => {
    const onSort = vi.fn();
    const { table } = makeTable(10, { onSort });
    const button = table.el.querySelector(".vl-vt-sort") as HTMLButtonElement;
    button.click();
    expect(onSort).toHaveBeenCalledWith("name");
    table.setSort("name", "desc");
    const header = table.el.querySelector('[role=columnheader][data-key="name"]')!;
    expect(header.getAttribute("aria-sort")).toBe("descending");
    expect(header.textContent).toContain("▼");
  });

  it("shrinks to fewer rows and marks selected rows", () => {
    const selected = new Set([2]);
    const { table } = makeTable(100, { rowSelected: (r) => selected.has(r) });
    expect(table.el.querySelector('.vl-vt-row[data-row="2"]')!.getAttribute("aria-selected")).toBe("true");
    table.setRowCount(3);
    expect(shownRows(table)).toEqual([0, 1, 2]);
    table.setRowCount(0);
    expect(shownRows(table)).toEqual([]);
  });

  it("fits its height to few rows and caps it for many", () => {
    const { table } = makeTable(2);
    expect(table.viewport.style.height).toBe(`${(3 + 1) * 20 + 4}px`); // room for 3 rows + header
    table.setRowCount(10_000);
    expect(table.viewport.style.height).toBe("200px");
  });

  it("resizes a column by dragging its header edge, and fits one to its content", () => {
    const { table } = makeTable(10);
    const cols = () => table.el.style.getPropertyValue("--vl-vt-cols");
    expect(cols()).toBe("minmax(100px, 1fr) minmax(60px, 0fr)");
    const grip = table.el.querySelector<HTMLElement>('.vl-vt-hcell[data-key="n"] .vl-vt-resizer')!;
    const Ptr = (globalThis as any).PointerEvent ?? MouseEvent;
    grip.dispatchEvent(new Ptr("pointerdown", { bubbles: true, clientX: 500 }));
    document.dispatchEvent(new Ptr("pointermove", { bubbles: true, clientX: 560 }));
    document.dispatchEvent(new Ptr("pointerup", { bubbles: true, clientX: 560 }));
    expect(cols()).toBe("minmax(100px, 1fr) 120px"); // jsdom has no layout: start = floor 60
    document.dispatchEvent(new Ptr("pointermove", { bubbles: true, clientX: 900 }));
    expect(cols()).toBe("minmax(100px, 1fr) 120px"); // released: no more resizing
    table.fitColumn("name", "x".repeat(30));
    expect(cols()).toBe("minmax(228px, 1fr) 120px");
    expect(table.el.style.getPropertyValue("--vl-vt-min-width")).toBe("348px");
    table.setColumnWidth("name", null);
    expect(cols()).toBe("minmax(100px, 1fr) 120px");
    expect(table.el.querySelector('.vl-vt-hcell[data-key="name"]')!.getAttribute("title")).toBe("Name");
    table.destroy();
  });
});
