// The attribution viewer's wire types: what the kernel sends (see
// widgets/attribution_viewer_payload.py) and the traitlets the front end reads.
import type { AnyModel } from "@anywidget/types";
import type { NDArray } from "../../lib/payload";

export type Scale = "normalized" | "raw";
export type View = "grid" | "single";

export interface LayerChoice {
  path: string;
  type: string;
  /** The capture modes this layer can be read in for every camera (the engine decides). */
  modes: string[];
}

export interface MethodChoice {
  value: string;
  label: string;
}

/** One camera's explanation as the kernel sends it (see attribution_viewer.py:_record_payload). */
export interface AttributionPayload extends MapFlatness {
  camera_key: string;
  method: string;
  method_label: string;
  layer: string;
  capture_mode: string;
  target: string;
  score: number;
  /** Raw attribution values at the camera image's resolution, float32 [H, W]. */
  map: NDArray;
  /** [h, w] of the map at the target layer, before upsampling. */
  layer_shape: number[];
}

/** A map's range and whether it is near-flat beside the other cameras' maps. */
export interface MapFlatness {
  map: NDArray;
  min: number;
  max: number;
  /** max - min (NaN when an end is not finite). */
  span: number;
  /** span / the largest span among the cameras shown (attribution.flatness.map_flatness). */
  relative_span: number;
  largest_camera: string;
  /** Near-flat next to the other cameras or under the absolute floor: normalising it would lie. */
  flat: boolean;
  flat_reason: string;
}

/** One camera's aggregate map over the dataset slice, flatness judged across cameras. */
export type AggregatePayload = MapFlatness;

/** How much the score drops when one camera's input is replaced by the baseline. */
export interface ReliancePayload {
  camera: string;
  /** Mean drop over the slice (score with the camera minus score with the baseline). */
  drop: number;
  /** Standard deviation of the drop over the slice's samples. */
  std: number;
  /** Share of the summed positive drops, in [0, 1] (0 for a camera whose removal helps). */
  share: number;
}

/** A sample the engine kept as one of a camera's most or least concentrated maps. */
export interface ConcentrationPayload {
  /** Position of the sample in the slice, in loader order. */
  sample_id: number;
  /** Share of the map's total in its hottest 10 % of cells. */
  concentration: number;
  /** Where the sample sits on the slider, or null when it was not kept. */
  kept_index: number | null;
  /** The sample's raw map at the layer's resolution. */
  map: NDArray;
}

/** One camera's most and least concentrated samples (attribution_viewer_payload.py). */
export interface ConcentrationStrip {
  most: ConcentrationPayload[];
  least: ConcentrationPayload[];
  /**
   * The one concentration every listed sample shares (the engine's
   * CameraMapStatistics.uniform_concentration), or null when they differ.
   */
  uniform?: number | null;
}

/** The dataset view's payload (see attribution_viewer.py:_dataset_payload). */
export interface DatasetPayload {
  samples: number;
  batches: number;
  /** Labels of the samples the slider can show, in loader order. */
  kept: string[];
  baseline: string;
  score_label: string;
  method_label: string;
  /** The method's registry name (e.g. "grad_cam_plus_plus"). */
  method?: string;
  layer: string;
  /** Maps left out of every statistic for a NaN or infinite value (all cameras). */
  nonfinite_maps?: number;
  stats: MethodChoice[];
  /** stat value -> camera -> aggregate map, over every class. */
  aggregates: Record<string, Record<string, AggregatePayload>>;
  /** "all", then each class the engine reports (value: the class index as a string). */
  classes?: MethodChoice[];
  /** class value -> stat value -> camera -> aggregate map of that class's samples. */
  class_aggregates?: Record<string, Record<string, Record<string, AggregatePayload>>>;
  /** class value ("all" included) -> camera -> the most and least concentrated samples. */
  concentration?: Record<string, Record<string, ConcentrationStrip>>;
  reliance: ReliancePayload[];
}

/** Where the dataset pass is (published by the kernel for a run started from Python). */
export interface DatasetTask {
  id?: string;
  state?: "running" | "done" | "failed" | "cancelled";
  /** "mean": reading the loader for the mean-image baseline; "maps": explaining batches. */
  phase?: "mean" | "maps";
  done?: number;
  total?: number;
  message?: string;
}

export interface AttributionViewerModel {
  camera_keys: string[];
  images: Record<string, unknown>;
  attributions: Record<string, unknown>;
  methods: MethodChoice[];
  capture_modes: string[];
  layers: LayerChoice[];
  explicit_targets: boolean;
  method: string;
  layer: string;
  /** The layer in the chooser, not yet applied; shared with other widgets' module selection. */
  selected_layer: string;
  capture_mode: string;
  target_class: number | null;
  target_label: string;
  colormap: string;
  opacity: number;
  scale: Scale;
  view: View;
  focused_camera: string;
  dataset: Record<string, unknown>;
  dataset_task: DatasetTask;
  sample_index: number;
  aggregate_stat: string;
  /** "all" or a class index as a string: whose aggregate maps the dataset view shows. */
  aggregate_class: string;
  status: string;
  error: string;
  error_traceback: string;
}

export type Model = AnyModel<AttributionViewerModel>;
