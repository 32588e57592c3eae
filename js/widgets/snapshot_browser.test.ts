import { describe, expect, it, vi } from "vitest";
import { FakeModel, dataView, stringColumn } from "../lib/fake-model";
import { histogram, histogramSvg } from "../lib/histogram";
import widget, { Snapshots, numberText, snapshotsCsv } from "./snapshot_browser";

const ints = (name: string, values: number[]) => ({ name, dtype: "int32", data: dataView(Int32Array.from(values)) });

/** What snapshot_table_payload() sends for three snapshots. */
function payload() {
  const rows = [
    ["<img src=x onerror=__pwned=1>", 0, "input", "args[0]", "[2,3]", "torch.float32", "cpu", 6, 24, "", 0, 6],
    ["head", 0, "output", "output", "[2]", "torch.bool", "cpu", 2, 2, "", 6, 2],
    ["head", 0, "output", "output[1]", "[2]", "torch.complex64", "cpu", 2, 0, "complex dtype", 8, 0],
  ] as const;
  const col = (i: number) => rows.map((r) => r[i]);
  return {
    table: {
      $table: {
        length: rows.length,
        columns: [
          stringColumn("module_path", col(0) as string[]), ints("call_index", col(1) as number[]),
          stringColumn("direction", col(2) as string[]), stringColumn("tensor_path", col(3) as string[]),
          stringColumn("shape", col(4) as string[]), stringColumn("dtype", col(5) as string[]),
          stringColumn("device", col(6) as string[]), ints("numel", col(7) as number[]),
          ints("sampled_bytes", col(8) as number[]), stringColumn("sample_omission_reason", col(9) as string[]),
          ints("values_start", col(10) as number[]), ints("values_count", col(11) as number[]),
        ],
      },
    },
    values: { $array: { dtype: "float64", shape: [8], data: dataView(Float64Array.from([0.5, -1, NaN, 3, 4, 5, 0, 1])) } },
  };
}

function setup(state: Record<string, any> = {}) {
  const model = new FakeModel<any>({
    modules: {}, model_summary: {}, selected_paths: ["head"], tree_view: true,
    snapshot_table: payload(),
    capture_summary: { tensors: 3, max_tensors: 64, sampled_bytes: 26, max_bytes: 16384, modules: 2, ok: true, error: null },
    limits: { max_tensors: 64, max_samples_per_tensor: 32, max_bytes: 16384, max_traversal_nodes: 4096, max_container_depth: 32, max_summary_elements: 262144 },
    can_capture: true, embedded_table: false,
    status: "idle", error: "", error_traceback: "",
    ...state,
  });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const rowEl = (el: HTMLElement, r: number) => el.querySelector<HTMLElement>(`.vl-sb-results .vl-vt-row[data-row="${r}"]`)!;

describe("snapshot browser", () => {
  it("shows snapshots, quota usage and hostile names as text", () => {
    const { el } = setup();
    expect(el.querySelectorAll(".vl-sb-results .vl-vt-row:not([hidden])").length).toBe(3);
    expect(rowEl(el, 0).querySelector('[data-key="module_path"]')!.textContent).toBe("<img src=x onerror=__pwned=1>");
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector(".vl-sb-tensors")!.textContent).toBe("3 / 64");
    expect(el.querySelector(".vl-sb-bytes")!.textContent).toBe("26 / 16,384");
    expect((el.querySelector(".vl-sb-tensors-meter") as HTMLProgressElement).value).toBe(3);
    expect(el.querySelector(".vl-sb-linked")!.textContent).toContain("head");
  });

  it("row detail shows the sampled values, a histogram, or why nothing was sampled", () => {
    const { el } = setup();
    rowEl(el, 0).click();
    const values = Array.from(el.querySelectorAll(".vl-sb-value")).map((v) => v.textContent);
    expect(values).toEqual(["0.5", "-1", "NaN", "3", "4", "5"]);
    const svg = el.querySelector("svg.vl-hist")!;
    expect(svg.querySelectorAll("rect").length).toBeGreaterThan(1);
    expect(svg.getAttribute("aria-label")).toContain("1 NaN/infinite not shown");
    expect(el.querySelector(".vl-sb-facts")!.textContent).toContain("first 6 of 6 values");
    rowEl(el, 1).click();
    expect(Array.from(el.querySelectorAll(".vl-sb-value")).map((v) => v.textContent)).toEqual(["false", "true"]);
    rowEl(el, 2).click();
    expect(el.querySelector(".vl-sb-reason")!.textContent).toContain("complex dtype");
    expect(el.querySelector("svg.vl-hist")).toBeNull();
  });

  it("Capture sends the selection and limits; kernel errors are shown", async () => {
    const { el, model } = setup();
    const input = el.querySelector<HTMLInputElement>('input[name="max_tensors"]')!;
    expect(input.value).toBe("64");
    input.value = "0";
    input.dispatchEvent(new Event("input"));
    expect(input.getAttribute("aria-invalid")).toBe("true");
    expect(el.querySelector(".vl-sb-limit-problem")!.textContent).toContain("max_tensors must be a positive whole number");
    expect(model.get("limits").max_tensors).toBe(64); // invalid values are not synced
    (el.querySelector(".vl-sb-capture") as HTMLButtonElement).click();
    const sent = model.sent.at(-1)!.content;
    expect(sent).toMatchObject({ kind: "command", name: "capture", args: { module_paths: ["head"], limits: { max_tensors: 0, max_bytes: 16384 } } });
    expect((el.querySelector(".vl-sb-capture") as HTMLButtonElement).disabled).toBe(true);
    model.receive({ kind: "error", id: sent.id, message: "capture: CaptureLimits.max_tensors must be a positive int, got 0", traceback: "" });
    await vi.waitFor(() => expect((el.querySelector(".vl-sb-capture") as HTMLButtonElement).disabled).toBe(false));
    const box = el.querySelector(".vl-error") as HTMLElement;
    expect(box.hidden).toBe(false);
    expect(box.textContent).toContain("max_tensors must be a positive int");
    input.value = "10";
    input.dispatchEvent(new Event("input"));
    expect(model.get("limits").max_tensors).toBe(10);
  });

  it("shows a failure from run() with its traceback via the error traitlets", () => {
    const { el, model } = setup();
    model.kernelSet("error_traceback", "Traceback (most recent call last):\n  File run\nRuntimeError: boom <b>x</b>");
    model.kernelSet("error", "capture failed: RuntimeError: boom");
    model.kernelSet("capture_summary", { tensors: 1, max_tensors: 64, sampled_bytes: 4, max_bytes: 100, modules: 1, ok: false, error: "RuntimeError: boom" });
    expect(el.querySelector(".vl-error-traceback")!.textContent).toContain("RuntimeError: boom <b>x</b>");
    expect(el.querySelector(".vl-error-traceback b")).toBeNull();
    expect(el.querySelector(".vl-sb-result-note")!.textContent).toContain("Partial: run() raised RuntimeError: boom");
  });

  it("warns, not reports ok, when no selected module ran", () => {
    const { el, model } = setup();
    model.kernelSet("capture_summary", {
      tensors: 0, max_tensors: 64, sampled_bytes: 0, max_bytes: 100, modules: 0, ok: false, error: null,
      warning: "run() finished, but none of the selected modules (head) ran while hooked: 0 tensors captured.",
    });
    const note = el.querySelector(".vl-sb-result-note")!;
    expect(note.textContent).toContain("0 modules observed. Warning: run() finished, but none of the selected modules (head) ran");
    expect(note.classList.contains("vl-sb-warning")).toBe(true);
    expect(note.getAttribute("role")).toBe("alert");
    model.kernelSet("capture_summary", { tensors: 2, max_tensors: 64, sampled_bytes: 8, max_bytes: 100, modules: 1, ok: true, error: null, warning: null });
    expect(note.textContent).toBe("1 module observed");
    expect(note.classList.contains("vl-sb-warning")).toBe(false);
  });

  it("prints floats at their dtype's precision", () => {
    const f32 = (x: number) => Math.fround(x);
    expect(numberText(f32(0.1), 23)).toBe("0.1");
    expect(numberText(f32(1 / 3), 23)).toBe("0.33333334");
    expect(numberText(f32(-123456.789), 23)).toBe("-123456.79");
    expect(numberText(f32(1e-30), 23)).toBe("1e-30");
    // float16 0.1 is 0.0999755859375 and float16 1/3 is 0.333251953125
    expect(numberText(0.0999755859375, 10)).toBe("0.1");
    expect(numberText(0.333251953125, 10)).toBe("0.3333");
    expect(numberText(65504, 10)).toBe("65504");
    expect(numberText(0.10000000149011612)).toBe("0.10000000149011612"); // float64: as is
    expect(numberText(3, 23)).toBe("3");
    expect(numberText(NaN, 23)).toBe("NaN");
    const { el, model } = setup();
    const p = payload();
    (p.values.$array as any).data = dataView(Float64Array.from([f32(0.1), f32(1 / 3), NaN, 3, 4, 5, 0, 1]));
    model.kernelSet("snapshot_table", p);
    rowEl(el, 0).click();
    expect(Array.from(el.querySelectorAll(".vl-sb-value")).map((v) => v.textContent)).toEqual(["0.1", "0.33333334", "NaN", "3", "4", "5"]);
    // the CSV keeps what the kernel holds, as vinlens.export writes it
    expect(snapshotsCsv(new Snapshots(p)).split("\r\n")[1]).toContain('"[0.10000000149011612,0.3333333432674408,""NaN"",3,4,5]"');
  });

  it("sizes the path columns to their content, shows full text on hover, never clips a header", () => {
    const long = "encoders.slam-left.backbone.stages.3.blocks.11.attention.qkv_projection";
    const p = payload();
    const cols = p.table.$table.columns;
    cols[0] = stringColumn("module_path", [long, "head", "head"]);
    const { el } = setup({ snapshot_table: p });
    const grid = el.querySelector<HTMLElement>(".vl-sb-results .vl-vt")!;
    const tracks = grid.style.getPropertyValue("--vl-vt-cols").split(" ");
    expect(tracks[0]).toBe(`minmax(${Math.min(420, long.length * 7 + 18)}px,`); // jsdom: estimated width
    const cell = rowEl(el, 0).querySelector<HTMLElement>('[data-key="module_path"]')!;
    expect(cell.title).toBe(long);
    const last = el.querySelector<HTMLElement>('.vl-sb-results .vl-vt-hcell[data-key="sample_omission_reason"]')!;
    expect(last.title).toBe("Not sampled: Why the values were not sampled (metadata only)");
    // the last track is never narrower than its label needs
    expect(Number.parseInt(tracks.at(-2)!.replace("minmax(", ""), 10)).toBeGreaterThanOrEqual(Math.ceil("Not sampled".length * 8.2) + 22);
    expect(el.querySelectorAll(".vl-sb-results .vl-vt-resizer").length).toBe(10);
  });

  it("a prefix of a large tensor is labelled as the prefix; the distribution is the whole tensor's", () => {
    const p = payload();
    const cols = p.table.$table.columns as any[];
    // a conv output of 4,096 values whose first 6 were kept
    cols[cols.findIndex((c) => c.name === "numel")] = { name: "numel", dtype: "int32", data: dataView(Int32Array.from([4096, 2, 2])) };
    const { el } = setup({ snapshot_table: p });
    rowEl(el, 0).click();
    expect(el.querySelector(".vl-sb-prefix-title")!.textContent).toBe("First 6 values in memory order (a prefix, not a random sample)");
    expect(el.querySelector(".vl-sb-facts")!.textContent).toContain("first 6 of 4,096 values");
    // no whole-tensor summary here: the histogram says it is of the prefix only
    expect(el.querySelector(".vl-sb-prefix-hist")!.textContent).toContain("Histogram of these first 6 values only");
    const f64 = (name: string, values: number[]) => ({ name, dtype: "float64", data: dataView(Float64Array.from(values)) });
    cols.push({ name: "has_summary", dtype: "bool", data: dataView(Uint8Array.from([1, 0, 0])) },
      f64("summary_count", [4096, NaN, NaN]), f64("summary_mean", [0.2, NaN, NaN]), f64("summary_std", [0.9, NaN, NaN]),
      f64("summary_min", [-3, NaN, NaN]), f64("summary_max", [4, NaN, NaN]), f64("summary_zero_fraction", [0.3, NaN, NaN]),
      f64("summary_nan_count", [0, NaN, NaN]), f64("summary_posinf_count", [0, NaN, NaN]), f64("summary_neginf_count", [0, NaN, NaN]));
    const again = setup({ snapshot_table: p });
    rowEl(again.el, 0).click();
    expect(again.el.querySelector(".vl-sb-whole-title")!.textContent).toBe("Distribution of the whole tensor (all 4,096 values)");
    expect(again.el.querySelector(".vl-sb-whole svg.vl-boxes")).not.toBeNull();
    expect(again.el.querySelector(".vl-sb-prefix-hist")).toBeNull();
    expect(again.el.querySelector("svg.vl-hist")).toBeNull();
  });

  it("shows the whole-tensor summary beside the sample, and allows 0 summary elements", () => {
    const p = payload();
    const f64 = (name: string, values: number[]) => ({ name, dtype: "float64", data: dataView(Float64Array.from(values)) });
    p.table.$table.columns.push(
      { name: "has_summary", dtype: "bool", data: dataView(Uint8Array.from([1, 0, 0])) } as any,
      f64("summary_count", [6, NaN, NaN]) as any, f64("summary_mean", [2.5, NaN, NaN]) as any,
      f64("summary_std", [1.5, NaN, NaN]) as any, f64("summary_min", [-1, NaN, NaN]) as any,
      f64("summary_max", [5, NaN, NaN]) as any, f64("summary_zero_fraction", [0, NaN, NaN]) as any,
      f64("summary_nan_count", [1, NaN, NaN]) as any, f64("summary_posinf_count", [0, NaN, NaN]) as any,
      f64("summary_neginf_count", [0, NaN, NaN]) as any,
    );
    const { el, model } = setup({ snapshot_table: p });
    rowEl(el, 0).click();
    const whole = el.querySelector(".vl-sb-whole")!;
    expect(whole.textContent).toContain("All 6 values: mean 2.5 ± 1.5 · range [-1, 5] · zeros 0 % · 1 NaN");
    expect(whole.querySelector(".vl-sb-nonfinite")).not.toBeNull();
    expect(whole.querySelector("svg.vl-boxes rect")).not.toBeNull();
    // With the whole-tensor summary, the distribution is the summary's: the kept values
    // are shown as what they are (the first ones), with no histogram of their own.
    expect(whole.querySelector(".vl-sb-whole-title")!.textContent).toBe("Distribution of the whole tensor (all 6 values)");
    expect(el.querySelector(".vl-sb-prefix-hist")).toBeNull();
    expect(el.querySelector(".vl-sb-prefix-title")!.textContent).toBe("All 6 values, in memory order");
    rowEl(el, 1).click();
    expect(el.querySelector(".vl-sb-whole")).toBeNull(); // a bool tensor has no summary
    const input = el.querySelector<HTMLInputElement>('input[name="max_summary_elements"]')!;
    expect(input.value).toBe("262144");
    input.value = "0";
    input.dispatchEvent(new Event("input"));
    expect(input.getAttribute("aria-invalid")).toBe("false");
    expect(model.get("limits").max_summary_elements).toBe(0);
    input.value = "-1";
    input.dispatchEvent(new Event("input"));
    expect(el.querySelector(".vl-sb-limit-problem")!.textContent).toContain("max_summary_elements must be a non-negative whole number");
  });

  it("builds the CSV with the export columns and downloads it", () => {
    const { el } = setup();
    const snaps = new Snapshots(payload());
    const csv = snapshotsCsv(snaps).split("\r\n");
    expect(csv[0]).toBe("module_path,call_index,direction,tensor_path,shape,dtype,device,numel,sampled_bytes,values,sample_omission_reason");
    expect(csv[1]).toBe('<img src=x onerror=__pwned=1>,0,input,args[0],"[2,3]",torch.float32,cpu,6,24,"[0.5,-1,""NaN"",3,4,5]",');
    expect(csv[2]).toContain(',"[false,true]",');
    expect(csv[3].endsWith(",[],complex dtype")).toBe(true);
    const created = vi.fn((_blob: Blob) => "blob:x");
    (URL as any).createObjectURL = created; // jsdom has no object URLs
    (URL as any).revokeObjectURL = () => {};
    const clicked = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(() => {});
    (el.querySelector(".vl-sb-download") as HTMLButtonElement).click();
    expect(created).toHaveBeenCalledTimes(1);
    expect(created.mock.calls[0][0].type).toBe("text/csv;charset=utf-8");
    expect(clicked).toHaveBeenCalled();
  });

  it("embeds the module table when not linked; read-only view hides the controls", () => {
    const { el } = setup({ embedded_table: true });
    expect(el.querySelector(".vl-sb-picker .vl-mt")).not.toBeNull();
    const ro = setup({ can_capture: false });
    expect((ro.el.querySelector(".vl-sb-controls") as HTMLElement).hidden).toBe(true);
    expect(ro.el.querySelectorAll(".vl-sb-results .vl-vt-row:not([hidden])").length).toBe(3);
  });

  it("cleans up", () => {
    const { model, cleanup } = setup({ embedded_table: true });
    cleanup();
    expect(model.listenerCount("change:snapshot_table")).toBe(0);
    expect(model.listenerCount("change:selected_paths")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });
});

describe("histogram", () => {
  it("bins finite values and counts the rest", () => {
    const hh = histogram([0, 1, 2, 3, NaN, Infinity], 3);
    expect(hh.counts).toEqual([1, 1, 2]);
    expect([hh.min, hh.max, hh.nonFinite]).toEqual([0, 3, 2]);
    expect(histogram([5, 5, 5]).counts).toEqual([3]);
    expect(histogram([]).counts).toEqual([]);
    const svg = histogramSvg([NaN]);
    expect(svg.querySelector("title")!.textContent).toBe("No finite values to plot");
  });
});
