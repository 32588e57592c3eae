import { describe, expect, it } from "vitest";
import { FakeModel } from "../lib/fake-model";
import widget, { highlight } from "./config_tree";

const f = (path: string[], value_text: string, value_kind = "number", declared_type = "int", configured_type = "builtins.int") =>
  ({ path, declared_type, configured_type, value: null, value_kind, value_text });

const SPEC = {
  config_type: "app.VinConfig",
  target_type: "app.models.Vin",
  fields: [
    f(["name"], "'<script>__pwned=1</script>'", "string", "str", "builtins.str"),
    f(["encoder"], "<app.Encoder>", "marker", "app.Encoder", "app.Encoder"),
    f(["encoder", "depth"], "6"),
    f(["encoder", "attn"], "<app.Attn>", "marker", "app.Attn", "app.Attn"),
    f(["encoder", "attn", "heads"], "8"),
    f(["layers"], "<builtins.list>", "marker", "list[app.L]", "builtins.list"),
    f(["layers", "0"], "<app.L>", "marker", "app.L", "app.L"),
    f(["layers", "0", "width"], "64"),
  ],
};

function setup(query = "") {
  const model = new FakeModel<any>({ spec: SPEC, query, status: "idle", error: "", error_traceback: "" });
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = widget.render({ model, el } as any);
  return { model, el, cleanup };
}

const shown = (el: HTMLElement) =>
  Array.from(el.querySelectorAll<HTMLElement>(".vl-ct-row:not([hidden])")).map((r) => r.title);

describe("config tree", () => {
  it("shows the target type at the root and top-level fields, values as text", () => {
    const { el } = setup();
    expect(el.querySelector(".vl-ct-target-type")!.textContent).toBe("app.models.Vin");
    // top-level models start open, deeper ones closed
    expect(shown(el)).toEqual(["name", "encoder", "encoder.depth", "encoder.attn", "layers", "layers.0"]);
    expect(el.querySelector("script")).toBeNull();
    expect(el.querySelector(".vl-ct-value")!.textContent).toBe("'<script>__pwned=1</script>'");
  });

  it("expands and collapses by click, keys and the all buttons", () => {
    const { el } = setup();
    const encoder = el.querySelector<HTMLElement>('.vl-ct-row[title="encoder"]')!;
    expect(encoder.getAttribute("aria-expanded")).toBe("true");
    encoder.click();
    expect(encoder.getAttribute("aria-expanded")).toBe("false");
    expect(shown(el)).toEqual(["name", "encoder", "layers", "layers.0"]);
    encoder.click();
    expect(shown(el)).toEqual(["name", "encoder", "encoder.depth", "encoder.attn", "layers", "layers.0"]);
    encoder.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowDown", bubbles: true }));
    expect(document.activeElement?.getAttribute("title")).toBe("encoder.depth");
    (el.querySelector(".vl-ct-expand-all") as HTMLButtonElement).click();
    expect(shown(el).length).toBe(8);
    expect(el.querySelector('.vl-ct-row[title="layers.0"] .vl-ct-name')!.textContent).toBe("[0]");
    (el.querySelector(".vl-ct-collapse-all") as HTMLButtonElement).click();
    expect(shown(el)).toEqual(["name", "encoder", "layers"]);
  });

  it("search filters, reveals ancestors, highlights and syncs the query", () => {
    const { el, model } = setup();
    const search = el.querySelector(".vl-ct-search") as HTMLInputElement;
    search.value = "HEADS";
    search.dispatchEvent(new Event("input"));
    expect(shown(el)).toEqual(["encoder", "encoder.attn", "encoder.attn.heads"]);
    expect(el.querySelector(".vl-ct-match .vl-ct-mark")!.textContent).toBe("heads");
    expect(model.get("query")).toBe("HEADS");
    expect(el.querySelector(".vl-ct-count")!.textContent).toBe("1 of 8 fields match");
    model.kernelSet("query", "64");
    expect(shown(el)).toEqual(["layers", "layers.0", "layers.0.width"]);
    model.kernelSet("query", "");
    expect(shown(el)).toEqual(["name", "encoder", "encoder.depth", "encoder.attn", "layers", "layers.0"]);
  });

  it("rebuilds when the kernel sends a new spec and cleans up", () => {
    const { el, model, cleanup } = setup();
    model.kernelSet("spec", { config_type: "x.C", target_type: null, fields: [] });
    expect(el.querySelector(".vl-ct-target")!.textContent).toContain("no target_type");
    expect(el.querySelector(".vl-ct-empty")).not.toBeNull();
    cleanup();
    expect(model.listenerCount("change:spec")).toBe(0);
  });

  it("highlight marks every case-insensitive occurrence", () => {
    const parts = highlight("AbcABC", "abc");
    expect(parts.length).toBe(2);
    expect(parts.every((p) => typeof p !== "string")).toBe(true);
  });
});
