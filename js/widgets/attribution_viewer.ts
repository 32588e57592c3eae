// AttributionViewerWidget front end: one panel per camera with the image and its
// attribution heatmap composited on a canvas, display controls (colormap, opacity,
// normalised or raw scale, side by side or one enlarged) applied locally, and the
// explanation controls (method, layer, capture mode, target class) sent to the kernel as
// an "explain" command that reports progress per camera. The parts live in
// js/widgets/attribution/: controls (toolbar), panels (camera panels), dataset (dataset
// view), text (pure wording and range rules), types (wire types).
//
// Everything from the kernel is inserted as text (js/lib/dom.ts); images and maps arrive
// as binary arrays ({"$array"} nodes holding DataViews), never as base64 or JSON lists.
import type { RenderProps } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import "./attribution_viewer.css";
import { h } from "../lib/dom";
import { CommandClient, type CommandError } from "../lib/protocol";
import { statusView } from "../lib/status";
import { explainControls } from "./attribution/controls";
import { datasetView } from "./attribution/dataset";
import { cameraPanels } from "./attribution/panels";
import type { AttributionViewerModel, Model } from "./attribution/types";

export * from "./attribution/types";
export {
  EXPLICIT_LAYER, aggregateMaps, concentrationText, displayRange, mapExplanation, modesFor, rangeText, sampleLabel,
  spanWords,
} from "./attribution/text";
export { decimalsFor, fixed, nonfiniteText, relianceBar, relianceText } from "./attribution/dataset";

function render({ model, el }: RenderProps<AttributionViewerModel>): () => void {
  const m = model as Model;
  const client = new CommandClient(m);
  const status = statusView(m);
  let running: (Promise<unknown> & { id: string }) | null = null;
  let pendingSample: number | null = null;

  const controls = explainControls(m, {
    isRunning: () => running !== null,
    hasRecords: () => panels.records().size > 0,
  });
  const panels = cameraPanels(m, { onRecords: () => controls.updateDirty() });
  const dataset = datasetView(m, client, { showSample, samplePending: () => pendingSample !== null });

  const root = h(
    // Keys pressed inside the widget are ours: JupyterLab's notebook shortcuts (Enter to
    // edit, arrows to move between cells) must not act on them.
    "div", { class: "vl-root vl-av", "data-lm-suppress-shortcuts": "true" },
    controls.el, panels.display, status.el, panels.empty, panels.grid, dataset.el,
  );
  const stopScheme = mountRoot(el, root);
  // The notebook's own keydown handler (bubble phase, outside the shortcut system that
  // data-lm-suppress-shortcuts covers) takes arrow keys for moving between cells and
  // cancels their default, so a focused slider or number field would not move. Keys
  // typed into the widget's form controls stop here.
  const keepKeys = (ev: KeyboardEvent): void => {
    const target = ev.target as HTMLElement | null;
    if (target && ["INPUT", "SELECT", "TEXTAREA"].includes(target.tagName)) ev.stopPropagation();
  };
  root.addEventListener("keydown", keepKeys);

  function showSample(index: number): void {
    if (running) { pendingSample = index; return; }
    pendingSample = null;
    void runExplain({ sample: index });
  }

  function setRunning(on: boolean): void {
    controls.setRunning(on);
    if (!on) panels.setPending([]);
  }

  async function runExplain(sample?: { sample: number }): Promise<void> {
    if (running || (controls.offeredModes().length === 0 && !sample)) return;
    // A sample change keeps the applied method and layer; Recompute applies the drafts.
    const args = sample ?? controls.draft();
    const keys = m.get("camera_keys") ?? [];
    status.clearError();
    panels.setPending(keys);
    setRunning(true);
    const label = (done: number, total: number) => `explaining: ${done} / ${total} cameras done`;
    status.progress(0, keys.length, label(0, keys.length));
    const request = client.request("explain", args, {
      onProgress(done, total) {
        // Progress counts cameras in camera order (gradient methods finish them together).
        panels.setPending(keys.slice(done));
        status.progress(done, total, label(done, total));
      },
    });
    running = request;
    try {
      await request;
      status.clearProgress();
      controls.syncAll(); // the drafts now are what the kernel applied
    } catch (e) {
      const err = e as CommandError;
      status.clearProgress();
      if (err.cancelled) status.progress(0, 1, "cancelled; showing the previous maps");
      else status.showError(err.message, err.traceback);
    } finally {
      running = null;
      setRunning(false);
      panels.paintAll();
      controls.updateDirty();
      dataset.syncSample();
      if (pendingSample !== null) showSample(pendingSample);
    }
  }

  const onClassKey = (ev: KeyboardEvent): void => { if (ev.key === "Enter") void runExplain(); };
  const onRecompute = (): void => void runExplain();
  const onCancel = (): void => { if (running) client.cancel(running.id); };
  controls.classInput.addEventListener("keydown", onClassKey);
  controls.recompute.addEventListener("click", onRecompute);
  controls.cancel.addEventListener("click", onCancel);

  const syncDisplay = (): void => { panels.syncDisplay(); dataset.paintAggregates(); };
  const listeners: [string, () => void][] = [
    ["change:methods", controls.syncMethods],
    ["change:layers", controls.syncLayers],
    ["change:explicit_targets", controls.syncLayers],
    ["change:method", controls.syncAll],
    ["change:layer", controls.syncAll],
    ["change:selected_layer", () => { controls.syncLayers(); controls.updateDirty(); }],
    ["change:capture_mode", controls.syncAll],
    ["change:target_class", controls.syncAll],
    ["change:target_label", controls.syncTarget],
    ["change:camera_keys", panels.syncPanels],
    ["change:images", panels.syncImages],
    ["change:attributions", panels.syncAttributions],
    ["change:colormap", syncDisplay],
    ["change:opacity", syncDisplay],
    ["change:scale", syncDisplay],
    ["change:view", panels.layout],
    ["change:focused_camera", panels.layout],
    ["change:dataset", dataset.syncDataset],
    ["change:dataset_task", dataset.syncTask],
    ["change:sample_index", dataset.syncSample],
    ["change:aggregate_stat", dataset.paintAggregates],
    ["change:aggregate_class", dataset.paintAggregates],
  ];
  for (const [event, cb] of listeners) m.on(event, cb);

  controls.syncMethods();
  controls.syncAll();
  panels.syncPanels();
  panels.syncAttributions();
  syncDisplay();
  dataset.syncDataset();
  dataset.syncTask();

  return () => {
    stopScheme();
    for (const [event, cb] of listeners) m.off(event, cb);
    root.removeEventListener("keydown", keepKeys);
    controls.classInput.removeEventListener("keydown", onClassKey);
    controls.recompute.removeEventListener("click", onRecompute);
    controls.cancel.removeEventListener("click", onCancel);
    controls.dispose();
    panels.dispose();
    dataset.dispose();
    status.dispose();
    client.dispose();
    root.remove();
  };
}

export default { render };
