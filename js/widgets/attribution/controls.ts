// The explanation toolbar: method, layer, capture mode and target class, kept as drafts
// until Recompute sends them to the kernel as one "explain" command.
import { h, replaceChildren } from "../../lib/dom";
import { EXPLICIT_LAYER, MODE_LABELS, labelled, modesFor, option } from "./text";
import type { LayerChoice, Model } from "./types";

export interface ExplainControls {
  el: HTMLElement;
  recompute: HTMLButtonElement;
  cancel: HTMLButtonElement;
  classInput: HTMLInputElement;
  /** The modes offered for the layer in the chooser (empty: nothing can be recomputed). */
  offeredModes(): string[];
  /** The arguments Recompute would send. */
  draft(): Record<string, unknown>;
  syncMethods(): void;
  syncLayers(): void;
  syncModes(): void;
  syncTarget(): void;
  syncAll(): void;
  updateDirty(): void;
  setRunning(on: boolean): void;
  dispose(): void;
}

export function explainControls(m: Model, hooks: { isRunning(): boolean; hasRecords(): boolean }): ExplainControls {
  const methodSelect = h("select", { class: "vl-input vl-av-method", "aria-label": "Attribution method" });
  const modeSelect = h("select", { class: "vl-input vl-av-mode", "aria-label": "Capture mode" });
  // A layer read in one mode only gets that mode as plain text, not a disabled menu of one.
  const modeText = h("span", { class: "vl-av-mode-text vl-mono", hidden: true });
  const layerSelect = h("select", { class: "vl-input vl-av-layer", "aria-label": "Target layer" });
  const classInput = h("input", {
    class: "vl-input vl-av-class", type: "number", min: 0, step: 1, "aria-label": "Target class index",
  });
  const targetText = h("span", { class: "vl-av-target vl-mono" });
  const targetName = h("span", { class: "vl-muted" }, "class");
  const recompute = h("button", { class: "vl-button vl-primary vl-av-recompute", type: "button" }, "Recompute");
  const cancel = h("button", { class: "vl-button vl-av-cancel", type: "button", hidden: true }, "Cancel");
  const dirty = h("span", { class: "vl-badge vl-warn vl-av-dirty", hidden: true }, "changes not applied");
  const el = h("div", { class: "vl-toolbar vl-av-explain" },
    h("span", { class: "vl-title" }, "Attribution"),
    labelled("method", methodSelect), labelled("layer", layerSelect),
    h("label", { class: "vl-av-field" }, h("span", { class: "vl-muted" }, "mode"), modeSelect, modeText),
    h("label", { class: "vl-av-field" }, targetName, h("span", { class: "vl-av-target-wrap" }, classInput, targetText)),
    recompute, cancel, dirty);

  let offered: string[] = [];

  function usableLayers(): LayerChoice[] {
    return (m.get("layers") ?? []).filter((c) => c.modes.length > 0);
  }

  function syncMethods(): void {
    const current = methodSelect.value || m.get("method");
    replaceChildren(methodSelect, ...m.get("methods").map((c) => option(c.value, c.label, c.value === current)));
  }

  function syncModes(): void {
    const modes = modesFor(layerSelect.value, usableLayers(), {
      layer: m.get("layer"), mode: m.get("capture_mode"), explicit: m.get("explicit_targets"),
    });
    let current = modeSelect.dataset.draft ?? m.get("capture_mode");
    if (!modes.includes(current)) current = modes[0] ?? "";
    if (modes.length === 0) {
      replaceChildren(modeSelect, option("", "(choose a layer first)", true));
    } else {
      replaceChildren(modeSelect, ...modes.map((mode) => option(mode, MODE_LABELS[mode] ?? mode, mode === current)));
    }
    modeSelect.value = current;
    const single = modes.length === 1;
    modeSelect.hidden = single;
    modeSelect.disabled = modes.length < 2;
    modeText.hidden = !single;
    modeText.textContent = single ? (MODE_LABELS[current] ?? current) : "";
    modeText.title = single ? "the only capture mode this layer can be read in" : "";
    offered = modes;
    recompute.disabled = hooks.isRunning() || modes.length === 0;
    recompute.title = modes.length === 0 ? "choose a layer first" : "";
    modeSelect.title = modes.length === 0 ? ""
      : `capture modes this layer can be read in: ${modes.map((x) => MODE_LABELS[x] ?? x).join(", ")}`;
  }

  function syncLayers(): void {
    const choices = usableLayers();
    const explicit = m.get("explicit_targets");
    const paths = choices.map((c) => c.path);
    let current = m.get("selected_layer") ?? m.get("layer");
    // A layer set from Python may be missing from the list (e.g. a per-camera mapping):
    // it stays offered as what was applied.
    const valid = (current === EXPLICIT_LAYER && explicit) || paths.includes(current) || current === m.get("layer");
    if (!valid) current = explicit ? EXPLICIT_LAYER : "";
    const opts: HTMLOptionElement[] = [];
    if (explicit) opts.push(option(EXPLICIT_LAYER, "(targets given in Python)", current === EXPLICIT_LAYER));
    else if (current === "") opts.push(option("", "(choose a layer)", true));
    if (current !== "" && !paths.includes(current)) opts.push(option(current, current, true));
    for (const c of choices) opts.push(option(c.path, c.type ? `${c.path}  (${c.type})` : c.path, c.path === current));
    replaceChildren(layerSelect, ...opts);
    layerSelect.value = current;
    syncModes();
  }

  function syncTarget(): void {
    const cls = m.get("target_class");
    classInput.hidden = cls === null || cls === undefined;
    if (!classInput.hidden && document.activeElement !== classInput) classInput.value = String(cls);
    targetText.textContent = classInput.hidden ? m.get("target_label") : "";
    targetText.hidden = !classInput.hidden;
    targetName.textContent = classInput.hidden ? "target" : "class";
  }

  function draft(): Record<string, unknown> {
    const args: Record<string, unknown> = { method: methodSelect.value, capture_mode: modeSelect.value || m.get("capture_mode") };
    args.layer = layerSelect.value === EXPLICIT_LAYER ? null : layerSelect.value;
    if (!classInput.hidden) args.target_class = classInput.value === "" ? null : Number(classInput.value);
    return args;
  }

  function updateDirty(): void {
    const d = draft();
    const changed = d.method !== m.get("method") || d.capture_mode !== m.get("capture_mode")
      || (d.layer ?? EXPLICIT_LAYER) !== m.get("layer")
      || ("target_class" in d && d.target_class !== m.get("target_class"));
    dirty.hidden = !changed || !hooks.hasRecords();
  }

  function syncAll(): void {
    methodSelect.value = m.get("method");
    delete modeSelect.dataset.draft;
    syncLayers();
    syncTarget();
    updateDirty();
  }

  function setRunning(on: boolean): void {
    recompute.disabled = on || offered.length === 0;
    cancel.hidden = !on;
  }

  const onLayer = (): void => {
    // Through the model: the kernel shares the chosen layer with linked widgets' selection.
    m.set("selected_layer", layerSelect.value);
    m.save_changes();
    syncModes();
    updateDirty();
  };
  const onMode = (): void => { modeSelect.dataset.draft = modeSelect.value; updateDirty(); };
  methodSelect.addEventListener("change", updateDirty);
  modeSelect.addEventListener("change", onMode);
  layerSelect.addEventListener("change", onLayer);
  classInput.addEventListener("input", updateDirty);

  return {
    el, recompute, cancel, classInput,
    offeredModes: () => offered,
    draft, syncMethods, syncLayers, syncModes, syncTarget, syncAll, updateDirty, setRunning,
    dispose() {
      methodSelect.removeEventListener("change", updateDirty);
      modeSelect.removeEventListener("change", onMode);
      layerSelect.removeEventListener("change", onLayer);
      classInput.removeEventListener("input", updateDirty);
    },
  };
}
