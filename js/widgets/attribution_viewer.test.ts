import { afterEach, describe, expect, it } from "vitest";
import { colormap } from "../lib/colormap";
import { dataView, FakeModel } from "../lib/fake-model";
import { compositeOverlay, imageToRGBA } from "../lib/overlay";
import type { NDArray } from "../lib/payload";
import widget, { aggregateMaps, concentrationText, decimalsFor, displayRange, fixed, mapExplanation, nonfiniteText, modesFor, rangeText, relianceBar, relianceText, sampleLabel, type DatasetPayload, type AttributionPayload, type AttributionViewerModel } from "./attribution_viewer";

function arrayNode(dtype: "uint8" | "float32", shape: number[], values: number[]) {
  const data = dtype === "uint8" ? new Uint8Array(values) : new Float32Array(values);
  return { $array: { dtype, shape, data: dataView(data) } };
}

function record(key: string, values: number[], shape: number[], extra: Partial<AttributionPayload> = {}) {
  const finite = values.filter(Number.isFinite);
  return {
    camera_key: key, method: "grad_cam", method_label: "Grad-CAM", layer: `encoders.${key}.conv3`,
    capture_mode: "dedicated_layer", target: "t", score: 1.5,
    map: arrayNode("float32", shape, values), layer_shape: [1, 1],
    min: Math.min(...finite), max: Math.max(...finite),
    span: Math.max(...finite) - Math.min(...finite), relative_span: 1, largest_camera: key,
    flat: false, flat_reason: "", ...extra,
  };
}

const HOSTILE = "<img src=x onerror=alert(1)>";

function state(over: Partial<AttributionViewerModel> = {}): AttributionViewerModel {
  return {
    camera_keys: ["rgb", HOSTILE],
    images: {
      rgb: arrayNode("uint8", [2, 2, 3], [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120]),
      [HOSTILE]: arrayNode("uint8", [2, 2], [0, 64, 128, 255]),
    },
    attributions: {},
    methods: [
      { value: "grad_cam", label: "Grad-CAM" },
      { value: "grad_cam_plus_plus", label: "Grad-CAM++" },
      { value: "ablation_cam", label: "Ablation-CAM" },
    ],
    capture_modes: ["dedicated_layer", "per_camera_call", "stacked_camera_batch"],
    layers: [
      { path: "encoders.{camera}.conv3", type: "Conv2d", modes: ["dedicated_layer"] },
      { path: "encoder.conv3", type: "Conv2d", modes: ["per_camera_call", "stacked_camera_batch"] },
      { path: "head", type: "Linear", modes: ["per_camera_call"] },
      { path: "pool", type: "AvgPool2d", modes: [] },
    ],
    explicit_targets: false,
    method: "grad_cam",
    layer: "encoders.{camera}.conv3",
    selected_layer: over.layer ?? "encoders.{camera}.conv3",
    capture_mode: "dedicated_layer",
    target_class: 0,
    target_label: "class 0",
    colormap: "viridis",
    opacity: 0.5,
    scale: "normalized",
    view: "grid",
    focused_camera: "rgb",
    dataset: {},
    dataset_task: {},
    sample_index: 0,
    aggregate_stat: "mean",
    aggregate_class: "all",
    status: "idle",
    error: "",
    error_traceback: "",
    ...over,
  };
}

// jsdom has no canvas: a minimal 2D context that keeps what was painted, per canvas.
const painted = new WeakMap<HTMLCanvasElement, { data: Uint8ClampedArray; width: number; height: number }>();
class FakeImageData {
  constructor(public data: Uint8ClampedArray, public width: number, public height: number) {}
}
(globalThis as any).ImageData ??= FakeImageData;
HTMLCanvasElement.prototype.getContext = function (this: HTMLCanvasElement) {
  return { putImageData: (img: FakeImageData) => painted.set(this, img) } as any;
} as any;

let cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups) c();
  cleanups = [];
  document.body.replaceChildren();
});

function mount(over: Partial<AttributionViewerModel> = {}) {
  const model = new FakeModel<AttributionViewerModel>(state(over));
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any) as () => void;
  cleanups.push(cleanup);
  const q = <T extends Element>(sel: string) => el.querySelector(sel) as T;
  return { model, el, q, cleanup };
}

function select(el: HTMLSelectElement, value: string) {
  el.value = value;
  el.dispatchEvent(new Event("change"));
}

describe("overlay compositing", () => {
  it("expands grey, RGB and RGBA images to opaque RGBA", () => {
    const grey: NDArray = { dtype: "uint8", shape: [1, 2], data: new Uint8Array([5, 250]) };
    expect(Array.from(imageToRGBA(grey))).toEqual([5, 5, 5, 255, 250, 250, 250, 255]);
    const rgba: NDArray = { dtype: "uint8", shape: [1, 1, 4], data: new Uint8Array([1, 2, 3, 9]) };
    expect(Array.from(imageToRGBA(rgba))).toEqual([1, 2, 3, 255]);
    const bad: NDArray = { dtype: "uint8", shape: [1, 1, 2], data: new Uint8Array(2) };
    expect(() => imageToRGBA(bad)).toThrow(/\[H, W, 3\]/);
  });

  it("blends the colormap over the image by opacity and leaves non-finite values alone", () => {
    const base = new Uint8ClampedArray([100, 100, 100, 255, 100, 100, 100, 255, 7, 8, 9, 255]);
    const map = [0, 2, NaN];
    const lut = colormap("magma").lut;
    const full = compositeOverlay(base, map, { colormap: "magma", vmin: 0, vmax: 2, opacity: 1 });
    expect(Array.from(full.slice(0, 3))).toEqual(Array.from(lut.slice(0, 3)));
    expect(Array.from(full.slice(4, 7))).toEqual(Array.from(lut.slice(255 * 3, 255 * 3 + 3)));
    expect(Array.from(full.slice(8, 11))).toEqual([7, 8, 9]);
    const none = compositeOverlay(base, map, { colormap: "magma", vmin: 0, vmax: 2, opacity: 0 });
    expect(Array.from(none)).toEqual(Array.from(base));
    const half = compositeOverlay(base, map, { colormap: "viridis", vmin: 0, vmax: 2, opacity: 0.5 });
    const top = colormap("viridis").lut.slice(255 * 3, 255 * 3 + 3);
    expect(half[4]).toBe(new Uint8ClampedArray([0.5 * 100 + 0.5 * top[0]])[0]);
    expect(() => compositeOverlay(base, [1], { colormap: "viridis", vmin: 0, vmax: 1, opacity: 1 })).toThrow(/1 values/);
  });

  it("uses each camera's own range when normalised and one shared range when raw", () => {
    const a = record("a", [0, 1], [1, 2]) as unknown as AttributionPayload;
    const b = record("b", [2, 5], [1, 2]) as unknown as AttributionPayload;
    expect(displayRange("normalized", b, [a, b])).toEqual({ vmin: 2, vmax: 5 });
    expect(displayRange("raw", a, [a, b])).toEqual({ vmin: 0, vmax: 5 });
  });
});

describe("capture modes offered for a layer", () => {
  const layers = state().layers;
  const applied = { layer: "encoders.{camera}.conv3", mode: "dedicated_layer", explicit: false };
  it("offers the engine's modes for a listed layer, the applied mode otherwise, none for no layer", () => {
    expect(modesFor("encoder.conv3", layers, applied)).toEqual(["per_camera_call", "stacked_camera_batch"]);
    expect(modesFor("encoders.{camera}.conv3", layers, applied)).toEqual(["dedicated_layer"]);
    expect(modesFor("from.python", layers, { ...applied, layer: "from.python" })).toEqual(["dedicated_layer"]);
    expect(modesFor("", layers, { ...applied, explicit: true })).toEqual(["dedicated_layer"]);
    expect(modesFor("", layers, applied)).toEqual([]);
    expect(modesFor("elsewhere", layers, applied)).toEqual([]);
  });
});

describe("AttributionViewerWidget view", () => {
  it("renders one panel per camera with kernel strings as text only", () => {
    const { el } = mount();
    const panels = el.querySelectorAll<HTMLElement>(".vl-av-panel");
    expect(panels.length).toBe(2);
    expect(panels[1].dataset.camera).toBe(HOSTILE);
    expect(panels[1].querySelector(".vl-av-camera")!.textContent).toBe(HOSTILE);
    expect(el.querySelector("img")).toBeNull();
    expect(el.querySelector(".vl-av-empty")!.hasAttribute("hidden")).toBe(false);
  });

  it("shows raw min/max, score and the layer for each camera's map", () => {
    const { el, model } = mount();
    model.kernelSet("attributions", {
      rgb: record("rgb", [0, 0.5, 1, 2], [2, 2]),
      [HOSTILE]: record(HOSTILE, [0, 0, 0, 4], [2, 2], { layer: HOSTILE }),
    });
    expect(el.querySelector(".vl-av-empty")!.hasAttribute("hidden")).toBe(true);
    const [rgb, other] = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-panel"));
    expect(rgb.querySelector(".vl-av-stats")!.textContent).toContain("raw min 0 · max 2");
    // Method and mode on one line, the layer on its own: nothing is cut off with an ellipsis.
    const lines = Array.from(rgb.querySelectorAll(".vl-av-detail-line")).map((l) => l.textContent);
    expect(lines).toEqual(["Grad-CAM · dedicated layer", "encoders.rgb.conv3"]);
    expect(other.querySelector(".vl-av-detail")!.textContent).toContain(HOSTILE);
    expect(rgb.querySelector(".vl-av-bar-max")!.textContent).toBe("2");
    const canvas = rgb.querySelector("canvas")!;
    expect([canvas.width, canvas.height]).toEqual([2, 2]);
    const base = new Uint8ClampedArray([10, 20, 30, 255, 40, 50, 60, 255, 70, 80, 90, 255, 100, 110, 120, 255]);
    const expected = compositeOverlay(base, [0, 0.5, 1, 2], { colormap: "viridis", vmin: 0, vmax: 2, opacity: 0.5 });
    expect(Array.from(painted.get(canvas)!.data)).toEqual(Array.from(expected));
    model.kernelSet("scale", "raw");
    expect(rgb.querySelector(".vl-av-bar-max")!.textContent).toBe("4");
    const raw = compositeOverlay(base, [0, 0.5, 1, 2], { colormap: "viridis", vmin: 0, vmax: 4, opacity: 0.5 });
    expect(Array.from(painted.get(canvas)!.data)).toEqual(Array.from(raw));
    expect(rgb.querySelector(".vl-av-stats")!.textContent).toContain("max 2");
    expect(el.querySelector("img")).toBeNull();
  });

  it("marks a near-flat camera with a badge and a hatch, and gives its raw span next to the largest", () => {
    const { el, model } = mount();
    model.kernelSet("attributions", {
      rgb: record("rgb", [0, 0.5, 1, 0.8], [2, 2]),
      [HOSTILE]: record(HOSTILE, [1.8e-4, 1.9e-4, 2e-4, 1.85e-4], [2, 2], {
        span: 2e-5, relative_span: 2.5e-5, largest_camera: "rgb", flat: true,
        flat_reason: "raw span 2e-05 is 0.0025% of rgb's 0.8",
      }),
    });
    const [rgb, flat] = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-panel"));
    expect(flat.classList.contains("vl-av-flat")).toBe(true);
    expect(flat.querySelector<HTMLElement>(".vl-av-flat-badge")!.hidden).toBe(false);
    expect(flat.querySelector<HTMLElement>(".vl-av-flat-badge")!.title).toContain("0.0025% of rgb's");
    expect(flat.querySelector<HTMLElement>(".vl-av-hatch")!.hidden).toBe(false);
    expect(flat.getAttribute("aria-label")).toContain("near-flat");
    expect(flat.querySelector(".vl-av-range")!.textContent).toBe("value range 2.000e-5, 0.0025% of the widest camera (rgb)");
    // Normalised per camera: the colourbar's ends are the flat camera's own raw range.
    expect(flat.querySelector(".vl-av-bar-min")!.textContent).toBe("1.800e-4");
    expect(flat.querySelector(".vl-av-bar-max")!.textContent).toBe("2.000e-4");
    expect(rgb.classList.contains("vl-av-flat")).toBe(false);
    expect(rgb.querySelector<HTMLElement>(".vl-av-flat-badge")!.hidden).toBe(true);
    expect(rgb.querySelector<HTMLElement>(".vl-av-hatch")!.hidden).toBe(true);
    expect(rgb.querySelector(".vl-av-range")!.textContent).toBe("value range 1");
    // The mark goes when a recompute makes the map structured.
    model.kernelSet("attributions", { rgb: record("rgb", [0, 1, 0, 1], [2, 2]), [HOSTILE]: record(HOSTILE, [0, 1, 0, 1], [2, 2]) });
    expect(flat.classList.contains("vl-av-flat")).toBe(false);
    expect(flat.querySelector<HTMLElement>(".vl-av-hatch")!.hidden).toBe(true);
  });

  it("words the raw span share of the largest camera compactly", () => {
    const base = record("a", [0, 1], [1, 2]) as unknown as AttributionPayload;
    expect(rangeText({ ...base, span: 0.3, relative_span: 0.375, largest_camera: "b" })).toBe("raw span 0.3 = 38% of b's");
    expect(rangeText({ ...base, span: 1e-9, relative_span: 1e-9, largest_camera: "b" })).toBe("raw span 1.000e-9 = <0.001% of b's");
    expect(rangeText({ ...base, span: 0, relative_span: 0, largest_camera: "a", flat: true })).toBe("raw span 0 (near-flat)");
  });

  it("writes display controls to the model", () => {
    const { q, model } = mount();
    select(q<HTMLSelectElement>(".vl-av-colormap"), "magma");
    expect(model.get("colormap")).toBe("magma");
    const opacity = q<HTMLInputElement>(".vl-av-opacity");
    opacity.value = "0.8";
    opacity.dispatchEvent(new Event("input"));
    expect(model.get("opacity")).toBeCloseTo(0.8);
    expect(q(".vl-av-opacity-value").textContent).toBe("80%");
    select(q<HTMLSelectElement>(".vl-av-scale"), "raw");
    expect(model.get("scale")).toBe("raw");
    expect(model.saved).toBe(3);
  });

  it("enlarges one camera and steps through cameras from the keyboard", () => {
    const { el, model } = mount();
    const panels = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-panel"));
    panels[1].dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(model.get("view")).toBe("single");
    expect(model.get("focused_camera")).toBe(HOSTILE);
    expect(panels[0].hidden).toBe(true);
    expect(panels[1].hidden).toBe(false);
    panels[1].dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    expect(model.get("focused_camera")).toBe("rgb");
    expect(panels[0].hidden).toBe(false);
    const tabs = Array.from(el.querySelectorAll<HTMLButtonElement>(".vl-av-tab"));
    expect(tabs.map((t) => t.textContent)).toEqual(["rgb", HOSTILE]);
    expect(tabs[0].getAttribute("aria-pressed")).toBe("true");
    panels[0].dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    expect(model.get("view")).toBe("grid");
    expect(panels.every((p) => !p.hidden)).toBe(true);
  });

  it("offers only the capture modes the chosen layer satisfies, and never changes the layer", () => {
    const { q, model } = mount();
    const layer = q<HTMLSelectElement>(".vl-av-layer");
    const mode = q<HTMLSelectElement>(".vl-av-mode");
    const values = (s: HTMLSelectElement) => Array.from(s.options).map((o) => o.value);
    // A layer no mode can satisfy is not offered at all.
    expect(values(layer)).toEqual(["encoders.{camera}.conv3", "encoder.conv3", "head"]);
    expect(layer.options[2].textContent).toBe("head  (Linear)");
    expect(values(mode)).toEqual(["dedicated_layer"]);
    // One possible mode is said as text, not offered as a disabled menu of one.
    expect(mode.hidden).toBe(true);
    expect(q<HTMLElement>(".vl-av-mode-text").hidden).toBe(false);
    expect(q(".vl-av-mode-text").textContent).toBe("dedicated layer");
    select(layer, "encoder.conv3");
    expect(values(mode)).toEqual(["per_camera_call", "stacked_camera_batch"]);
    expect(mode.value).toBe("per_camera_call");
    expect(mode.disabled).toBe(false);
    expect(mode.hidden).toBe(false);
    expect(q<HTMLElement>(".vl-av-mode-text").hidden).toBe(true);
    expect(mode.title).toContain("per-camera call, stacked batch");
    select(mode, "stacked_camera_batch");
    expect(layer.value).toBe("encoder.conv3");
    select(layer, "head");
    expect(values(mode)).toEqual(["per_camera_call"]);
    select(layer, "encoder.conv3");
    expect(mode.value).toBe("stacked_camera_batch"); // the user's mode choice is kept where it applies
    q<HTMLButtonElement>(".vl-av-recompute").click();
    expect(model.sent.at(-1)!.content.args).toMatchObject({ layer: "encoder.conv3", capture_mode: "stacked_camera_batch" });
  });

  it("shares the chosen layer through the model and follows a layer picked elsewhere", () => {
    const { q, model } = mount({ attributions: { rgb: record("rgb", [0, 1, 2, 3], [2, 2]) } });
    const layer = q<HTMLSelectElement>(".vl-av-layer");
    const saved = model.saved;
    select(layer, "head");
    expect(model.get("selected_layer")).toBe("head");
    expect(model.saved).toBe(saved + 1);
    expect(q<HTMLElement>(".vl-av-dirty").hidden).toBe(false);
    // The kernel moves the chooser when a linked module table picks encoder.conv3.
    model.kernelSet("selected_layer", "encoder.conv3");
    expect(layer.value).toBe("encoder.conv3");
    expect(Array.from(q<HTMLSelectElement>(".vl-av-mode").options).map((o) => o.value))
      .toEqual(["per_camera_call", "stacked_camera_batch"]);
    // Back to the applied layer: nothing left to apply.
    model.kernelSet("selected_layer", "encoders.{camera}.conv3");
    expect(q<HTMLElement>(".vl-av-dirty").hidden).toBe(true);
  });

  it("cannot recompute before a layer is chosen", () => {
    const { q, model } = mount({ layer: "" });
    expect(q<HTMLSelectElement>(".vl-av-layer").options[0].textContent).toBe("(choose a layer)");
    expect(q<HTMLSelectElement>(".vl-av-mode").options[0].textContent).toBe("(choose a layer first)");
    const button = q<HTMLButtonElement>(".vl-av-recompute");
    expect(button.disabled).toBe(true);
    const sent = model.sent.length;
    button.click();
    expect(model.sent.length).toBe(sent);
  });

  it("offers the Python targets when the viewer was given explicit targets", () => {
    const { q } = mount({ explicit_targets: true, layer: "" });
    const layer = q<HTMLSelectElement>(".vl-av-layer");
    expect(layer.value).toBe("");
    expect(layer.options[0].textContent).toBe("(targets given in Python)");
  });
});

function aggregate(values: number[], extra: Record<string, unknown> = {}) {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return {
    map: arrayNode("float32", [2, 2], values), min, max, span: max - min, relative_span: 1,
    largest_camera: "rgb", flat: false, flat_reason: "", ...extra,
  };
}

function datasetPayload(over: Partial<Record<keyof DatasetPayload, unknown>> = {}) {
  return {
    samples: 40, batches: 5, kept: ["batch 0 #0", "batch 0 #1", "batch 0 #2"], baseline: "zeros",
    score_label: "class 0", method_label: "Grad-CAM", layer: "encoders.{camera}.conv3",
    stats: [{ value: "mean", label: "mean" }, { value: "p90", label: "90th percentile" }],
    aggregates: {
      mean: { rgb: aggregate([0, 1, 2, 4]), [HOSTILE]: aggregate([1e-4, 1.1e-4, 1e-4, 1e-4], { flat: true, flat_reason: "tiny", relative_span: 2.5e-6 }) },
      p90: { rgb: aggregate([0, 2, 4, 8]), [HOSTILE]: aggregate([0, 1, 0, 1]) },
    },
    reliance: [{ camera: "rgb", drop: 3, std: 0.5, share: 0.75 }, { camera: HOSTILE, drop: -0.5, std: 0.25, share: 0 }],
    ...over,
  };
}

describe("dataset view", () => {
  it("stays hidden until the kernel sends a dataset summary", () => {
    const { q } = mount();
    expect(q<HTMLElement>(".vl-av-dataset").hidden).toBe(true);
  });

  it("shows aggregate maps per camera with the flat mark, and switches statistic through the model", () => {
    const { q, el, model } = mount({ dataset: datasetPayload() });
    expect(q<HTMLElement>(".vl-av-dataset").hidden).toBe(false);
    expect(q(".vl-av-ds-summary").textContent).toBe(
      "40 samples in 5 batches · Grad-CAM at encoders.{camera}.conv3 · class 0 · baseline zeros");
    const cards = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-agg"));
    expect(cards.map((c) => c.dataset.camera)).toEqual(["rgb", HOSTILE]);
    expect(cards[1].querySelector(".vl-av-camera")!.textContent).toBe(HOSTILE);
    expect(cards[1].classList.contains("vl-av-flat")).toBe(true);
    expect(cards[1].querySelector<HTMLElement>(".vl-av-hatch")!.hidden).toBe(false);
    expect(cards[0].querySelector<HTMLElement>(".vl-av-flat-badge")!.hidden).toBe(true);
    expect(cards[0].querySelector(".vl-av-bar-max")!.textContent).toBe("4");
    const canvas = cards[0].querySelector("canvas")!;
    const grey = new Uint8ClampedArray(16).fill(128);
    const expected = compositeOverlay(grey, [0, 1, 2, 4], { colormap: "viridis", vmin: 0, vmax: 4, opacity: 1 });
    expect(Array.from(painted.get(canvas)!.data)).toEqual(Array.from(expected));
    expect(Array.from(q<HTMLSelectElement>(".vl-av-stat").options).map((o) => o.textContent)).toEqual(["mean", "90th percentile"]);
    select(q<HTMLSelectElement>(".vl-av-stat"), "p90");
    expect(model.get("aggregate_stat")).toBe("p90");
    const p90 = el.querySelectorAll<HTMLElement>(".vl-av-agg");
    expect(p90[0].querySelector(".vl-av-bar-max")!.textContent).toBe("8");
    expect(p90[1].classList.contains("vl-av-flat")).toBe(false);
    expect(p90[0].querySelector(".vl-av-range")!.textContent).toBe("normalised range 8");
    expect(el.querySelector("img")).toBeNull();
  });

  it("draws one reliance bar per camera on one axis: a negative drop left of zero, to scale", () => {
    const { el } = mount({ dataset: datasetPayload() });
    const rows = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-rel-row"));
    expect(rows.map((r) => r.querySelector(".vl-av-rel-camera")!.textContent)).toEqual(["rgb", HOSTILE]);
    const fills = rows.map((r) => r.querySelector<HTMLElement>(".vl-av-rel-fill")!);
    // Axis from -0.5 to 3: zero at 14.3 %, the drop of 3 fills the rest, -0.5 the part left of zero.
    expect([fills[0].style.left, fills[0].style.width]).toEqual(["14.3%", "85.7%"]);
    expect([fills[1].style.left, fills[1].style.width]).toEqual(["0%", "14.3%"]);
    expect(rows[0].querySelector<HTMLElement>(".vl-av-rel-zero")!.style.left).toBe("14.3%");
    expect(fills[1].classList.contains("vl-av-rel-negative")).toBe(true);
    // One number format for every row; the rise is said in words, not as a share.
    expect(rows[0].querySelector(".vl-av-rel-value")!.textContent).toBe("+3.00 ± 0.50 (75% of all drops)");
    expect(rows[1].querySelector(".vl-av-rel-value")!.textContent).toBe("-0.50 ± 0.25 (score rises without it)");
    expect(el.querySelector(".vl-av-reliance-note")!.textContent).toContain("removal raises the score");
  });

  it("says once how many maps were left out for NaN", () => {
    expect(nonfiniteText(0)).toBe("");
    expect(nonfiniteText(1)).toBe(" · 1 map with NaN or inf left out of the statistics");
    const { q } = mount({ dataset: datasetPayload({ nonfinite_maps: 2 }) });
    expect(q(".vl-av-ds-summary").textContent).toContain("· 2 maps with NaN or inf left out");
  });

  it("words reliance at the decimals of the largest value", () => {
    const rows = [
      { camera: "a", drop: 0.9379, std: 0.08687, share: 1 },
      { camera: "b", drop: -0.003172, std: 3.274e-4, share: 0 },
    ];
    expect(decimalsFor([0.9379, 0.003])).toBe(3);
    expect(decimalsFor([120, 4])).toBe(0);
    expect(decimalsFor([0])).toBe(3);
    expect(relianceText(rows)).toEqual([
      "+0.938 ± 0.087 (100% of all drops)", "-0.003 ± <0.001 (score rises without it)",
    ]);
    expect(fixed(-0.0001, 3)).toBe(">-0.001");
    expect(relianceText([{ camera: "c", drop: 0, std: 0, share: 0 }])).toEqual(["0.000 ± 0.000 (no effect)"]);
    expect(relianceText([{ camera: "a", drop: 1, std: 0, share: 0.998 }, { camera: "b", drop: 0.002, std: 0, share: 0.002 }]))
      .toEqual(["+1.00 ± 0.00 (100% of all drops)", "+<0.01 ± 0.00 (<1% of all drops)"]);
    expect(mapExplanation({ method: "grad_cam", min: 0.33, max: 0.55, flat: true })).toContain("varies little");
    // No positive drop at all: the zero line sits at the right end, bars grow left.
    const neg = [{ camera: "a", drop: -2, std: 0, share: 0 }, { camera: "b", drop: -1, std: 0, share: 0 }];
    expect(relianceBar(-1, neg)).toEqual({ zero: 100, left: 50, width: 50 });
    expect(relianceBar(Number.NaN, neg)).toEqual({ zero: 100, left: 100, width: 0 });
  });

  it("explains a Grad-CAM++ raw scale and a constant map in one line", () => {
    expect(mapExplanation({ method: "grad_cam_plus_plus", min: 0, max: 259.7, flat: false })).toContain("own scale");
    expect(mapExplanation({ method: "grad_cam", min: 0.3333, max: 0.3333, flat: true })).toContain("one constant value (0.3333)");
    expect(mapExplanation({ method: "grad_cam_plus_plus", min: 0.33329, max: 0.33331, flat: true })).toContain("about 0.3333 everywhere");
    expect(mapExplanation({ method: "grad_cam_plus_plus", min: 0, max: 259.7, flat: false }, false)).toBe("");
    expect(mapExplanation({ method: "grad_cam", min: 0, max: 0.45, flat: false })).toBe("");
    const { el, model } = mount();
    model.kernelSet("attributions", {
      rgb: record("rgb", [0, 100, 200, 259.7], [2, 2], { method: "grad_cam_plus_plus", method_label: "Grad-CAM++" }),
      [HOSTILE]: record(HOSTILE, [0.3333, 0.3333, 0.3333, 0.3333], [2, 2]),
    });
    const lines = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-explain-line"));
    expect(lines.map((l) => l.hidden)).toEqual([false, false]);
    expect(lines[1].textContent).toContain("shows no location");
  });

  it("summarises cameras whose samples are all equally concentrated once, and keeps (not kept) in one piece", () => {
    const entry = (id: number, c: number, kept: number | null) => ({
      sample_id: id, concentration: c, kept_index: kept, map: arrayNode("float32", [2, 2], [1, 1, 1, 1]),
    });
    const flat = { most: [entry(0, 0.1, 0), entry(1, 0.1, 1)], least: [entry(2, 0.1, 2)], uniform: 0.1 };
    const { el } = mount({
      dataset: datasetPayload({ concentration: { all: { rgb: { most: [entry(31, 0.8, null)], least: [], uniform: null }, [HOSTILE]: flat } } }),
    });
    const card = el.querySelector<HTMLElement>(".vl-av-agg:last-child")!;
    expect(card.querySelectorAll(".vl-av-conc-sample")).toHaveLength(0);
    expect(card.querySelector(".vl-av-conc-uniform")!.textContent).toBe("every sample's map ≈ 0.10 concentrated");
    expect(el.querySelector<HTMLElement>(".vl-av-flat-summary")!.hidden).toBe(false);
    expect(el.querySelector(".vl-av-flat-summary")!.textContent).toContain(HOSTILE);
    const gone = el.querySelector<HTMLElement>(".vl-av-conc-gone")!;
    expect(gone.querySelector(".vl-av-conc-gone-note")!.textContent).toBe(" (not kept)");
  });

  it("asks the kernel for the sample the slider is released on, one request at a time", async () => {
    const { q, model } = mount({ dataset: datasetPayload() });
    const slider = q<HTMLInputElement>(".vl-av-sample");
    expect(slider.max).toBe("2");
    expect(q(".vl-av-sample-label").textContent).toBe("sample 1 / 3 · batch 0 #0");
    slider.value = "2";
    slider.dispatchEvent(new Event("input"));
    expect(q(".vl-av-sample-label").textContent).toBe("sample 3 / 3 · batch 0 #2");
    slider.dispatchEvent(new Event("change"));
    const first = model.sent.at(-1)!.content;
    expect(first).toMatchObject({ kind: "command", name: "explain", args: { sample: 2 } });
    // Moved again while the first runs: sent when the first is answered, not before.
    slider.value = "1";
    slider.dispatchEvent(new Event("change"));
    expect(model.sent.at(-1)!.content.id).toBe(first.id);
    model.kernelSet("sample_index", 2);
    model.receive({ kind: "result", id: first.id, data: { cameras: ["rgb"] } });
    await new Promise((r) => setTimeout(r, 0));
    expect(model.sent.at(-1)!.content).toMatchObject({ name: "explain", args: { sample: 1 } });
  });

  it("keeps keys typed into its controls from the notebook around it", () => {
    const { q, el } = mount({ dataset: datasetPayload() });
    const seen: string[] = [];
    el.addEventListener("keydown", (ev) => seen.push((ev.target as HTMLElement).className));
    q(".vl-av-sample").dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    q(".vl-av-class").dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowUp", bubbles: true }));
    q(".vl-av-panel").dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight", bubbles: true }));
    expect(seen).toEqual(["vl-av-panel"]);
  });

  it("shows a dataset pass started from Python and cancels it by its id", () => {
    const { q, model } = mount();
    model.kernelSet("dataset_task", { id: "ds-1", state: "running", done: 2, total: 5 });
    expect(q<HTMLElement>(".vl-av-dataset").hidden).toBe(false);
    expect(q(".vl-av-ds-progress").textContent).toBe("aggregating: 2 / 5 batches");
    q<HTMLButtonElement>(".vl-av-ds-cancel").click();
    expect(model.sent.at(-1)!.content).toEqual({ kind: "cancel", id: "ds-1" });
    model.kernelSet("dataset_task", { id: "ds-1", state: "cancelled", done: 2, total: 5 });
    expect(q<HTMLButtonElement>(".vl-av-ds-cancel").hidden).toBe(true);
    expect(q(".vl-av-ds-progress").textContent).toContain("cancelled");
  });

  it("switches the aggregate maps by class and jumps the slider to a concentrated sample", async () => {
    const entry = (id: number, c: number, kept: number | null) => ({
      sample_id: id, concentration: c, kept_index: kept, map: arrayNode("float32", [2, 2], [0, 1, 2, 3]),
    });
    const { q, el, model } = mount({
      dataset: datasetPayload({
        classes: [{ value: "all", label: "all classes (40)" }, { value: "3", label: HOSTILE }],
        class_aggregates: { 3: { mean: { rgb: aggregate([0, 5, 6, 7]) }, p90: {} } },
        concentration: {
          all: { rgb: { most: [entry(2, 0.9, 2), entry(31, 0.8, null)], least: [entry(0, 0.1, 0)] } },
          3: { rgb: { most: [entry(7, 0.5, null)], least: [] } },
        },
      }),
    });
    const classes = q<HTMLSelectElement>(".vl-av-agg-class");
    expect(Array.from(classes.options).map((o) => o.textContent)).toEqual(["all classes (40)", HOSTILE]);
    expect(el.querySelector(".vl-av-agg-class img")).toBeNull(); // kernel strings only as text
    const rgb = () => el.querySelector<HTMLElement>('.vl-av-agg[data-camera="rgb"]')!;
    const most = () => Array.from(rgb().querySelectorAll<HTMLElement>('.vl-av-conc[data-which="most"] .vl-av-conc-sample'));
    expect(most().map((e) => e.textContent)).toEqual(["#2 · 0.90", "#31 · 0.80 (not kept)"]);
    expect(most().map((e) => e.tagName)).toEqual(["BUTTON", "SPAN"]);
    // A kept sample jumps the slider and asks the kernel for it, as the slider would.
    most()[0].click();
    expect(q<HTMLInputElement>(".vl-av-sample").value).toBe("2");
    expect(q(".vl-av-sample-label").textContent).toBe("sample 3 / 3 · batch 0 #2");
    expect(model.sent.at(-1)!.content).toMatchObject({ kind: "command", name: "explain", args: { sample: 2 } });
    // Another class: its own maps (only the cameras it has) and its own strip.
    select(classes, "3");
    expect(model.get("aggregate_class")).toBe("3");
    const cards = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-agg"));
    expect(cards.map((c) => c.dataset.camera)).toEqual(["rgb"]);
    expect(cards[0].querySelector(".vl-av-bar-max")!.textContent).toBe("7");
    expect(most().map((e) => e.textContent)).toEqual(["#7 · 0.50 (not kept)"]);
    expect(rgb().querySelector('.vl-av-conc[data-which="least"]')!.textContent).toContain("none");
  });

  it("finds a class's maps and words concentrated samples", () => {
    const ds = datasetPayload({ class_aggregates: { 1: { mean: { rgb: aggregate([1, 2, 3, 4]) } } } }) as unknown as DatasetPayload;
    expect(aggregateMaps(ds, "all", "p90").rgb.max).toBe(8);
    expect(aggregateMaps(ds, "1", "mean").rgb.max).toBe(4);
    expect(aggregateMaps(ds, "1", "p90")).toEqual({});
    expect(aggregateMaps(ds, "9", "mean")).toEqual({});
    const map = arrayNode("float32", [1, 1], [0]) as unknown as NDArray;
    expect(concentrationText({ sample_id: 4, concentration: 0.123, kept_index: 4, map })).toBe("#4 · 0.12");
    expect(concentrationText({ sample_id: 40, concentration: 1, kept_index: null, map })).toBe("#40 · 1.00 (not kept)");
  });

  it("labels slider positions in words", () => {
    const ds = datasetPayload() as unknown as DatasetPayload;
    expect(sampleLabel(ds, 1)).toBe("sample 2 / 3 · batch 0 #1");
    expect(sampleLabel(ds, 99)).toBe("sample 3 / 3 · batch 0 #2");
    expect(sampleLabel({ ...ds, kept: [] }, 0)).toBe("no samples kept");
  });
});

describe("recompute", () => {
  it("sends the drafted method, layer, mode and class and tracks progress per camera", async () => {
    const { q, model, el } = mount();
    select(q<HTMLSelectElement>(".vl-av-method"), "ablation_cam");
    select(q<HTMLSelectElement>(".vl-av-layer"), "encoder.conv3");
    select(q<HTMLSelectElement>(".vl-av-mode"), "stacked_camera_batch");
    const cls = q<HTMLInputElement>(".vl-av-class");
    cls.value = "2";
    cls.dispatchEvent(new Event("input"));
    q<HTMLButtonElement>(".vl-av-recompute").click();
    const sent = model.sent.at(-1)!.content;
    expect(sent).toMatchObject({
      kind: "command", name: "explain",
      args: { method: "ablation_cam", capture_mode: "stacked_camera_batch", layer: "encoder.conv3", target_class: 2 },
    });
    expect(q<HTMLButtonElement>(".vl-av-recompute").disabled).toBe(true);
    expect(q<HTMLButtonElement>(".vl-av-cancel").hidden).toBe(false);
    const panels = Array.from(el.querySelectorAll<HTMLElement>(".vl-av-panel"));
    expect(panels.every((p) => p.classList.contains("vl-av-pending"))).toBe(true);

    model.receive({ kind: "progress", id: sent.id, done: 1, total: 2 });
    expect(q(".vl-progress-label").textContent).toBe("explaining: 1 / 2 cameras done");
    expect(panels[0].classList.contains("vl-av-pending")).toBe(false);
    expect(panels[1].classList.contains("vl-av-pending")).toBe(true);

    q<HTMLButtonElement>(".vl-av-cancel").click();
    expect(model.sent.at(-1)!.content).toEqual({ kind: "cancel", id: sent.id });

    model.receive({ kind: "result", id: sent.id, data: { cameras: ["rgb", HOSTILE] } });
    await new Promise((r) => setTimeout(r, 0));
    expect(q<HTMLButtonElement>(".vl-av-recompute").disabled).toBe(false);
    expect(q<HTMLButtonElement>(".vl-av-cancel").hidden).toBe(true);
    expect(panels.some((p) => p.classList.contains("vl-av-pending"))).toBe(false);
  });

  it("shows the kernel's error reply as text in the error box", async () => {
    const { q, model } = mount();
    q<HTMLButtonElement>(".vl-av-recompute").click();
    const { id } = model.sent.at(-1)!.content;
    model.receive({ kind: "error", id, message: `layer ${HOSTILE} is not a module`, traceback: "Traceback: boom", cancelled: false });
    await new Promise((r) => setTimeout(r, 0));
    const box = q<HTMLElement>(".vl-error");
    expect(box.hidden).toBe(false);
    expect(q(".vl-error-message").textContent).toBe(`layer ${HOSTILE} is not a module`);
    expect(q(".vl-error-traceback").textContent).toBe("Traceback: boom");
    expect(box.querySelector("img")).toBeNull();
    expect(q<HTMLButtonElement>(".vl-av-recompute").disabled).toBe(false);
  });

  it("marks unapplied changes and clears the mark when the kernel applies them", () => {
    const { q, model } = mount({ attributions: { rgb: record("rgb", [0, 1, 2, 3], [2, 2]) } });
    const dirty = q<HTMLElement>(".vl-av-dirty");
    expect(dirty.hidden).toBe(true);
    select(q<HTMLSelectElement>(".vl-av-method"), "grad_cam_plus_plus");
    expect(dirty.hidden).toBe(false);
    model.kernelSet("method", "grad_cam_plus_plus");
    expect(dirty.hidden).toBe(true);
  });

  it("stops listening to the model on cleanup", () => {
    const { model, cleanup } = mount();
    expect(model.listenerCount("change:attributions")).toBe(1);
    cleanup();
    expect(model.listenerCount("change:attributions")).toBe(0);
    expect(model.listenerCount("msg:custom")).toBe(0);
  });
});
