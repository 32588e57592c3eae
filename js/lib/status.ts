// The status line, progress bar and error box every vinlens widget shows.
import type { AnyModel } from "@anywidget/types";
import { h, replaceChildren } from "./dom";

export interface StatusView {
  el: HTMLElement;
  progress(done: number, total: number, label?: string): void;
  clearProgress(): void;
  showError(message: string, traceback?: string): void;
  clearError(): void;
  dispose(): void;
}

/** Binds to the `status`, `error` and `error_traceback` traitlets of the model. */
export function statusView(model: AnyModel): StatusView {
  const bar = h("progress", { class: "vl-progress", max: 1, value: 0, hidden: true });
  const label = h("span", { class: "vl-progress-label" });
  const errorText = h("div", { class: "vl-error-message" });
  const tb = h("pre", { class: "vl-error-traceback" });
  const details = h("details", { class: "vl-error-details" }, h("summary", {}, "Traceback"), tb);
  const dismiss = h("button", { class: "vl-button vl-error-dismiss", type: "button", "aria-label": "Dismiss error" }, "×");
  const errorBox = h("div", { class: "vl-error", role: "alert", hidden: true }, dismiss, errorText, details);
  const el = h("div", { class: "vl-status" }, h("div", { class: "vl-progress-row" }, bar, label), errorBox);

  const api: StatusView = {
    el,
    progress(done, total, text) {
      bar.hidden = false;
      bar.max = Math.max(total, 1);
      bar.value = done;
      label.textContent = text ?? `${done} / ${total}`;
    },
    clearProgress() {
      bar.hidden = true;
      label.textContent = "";
    },
    showError(message, traceback = "") {
      replaceChildren(errorText, message);
      tb.textContent = traceback;
      details.hidden = !traceback;
      errorBox.hidden = false;
    },
    clearError() {
      errorBox.hidden = true;
    },
    dispose() {
      model.off("change:error", sync);
    },
  };
  function sync() {
    const msg = model.get("error") as string;
    if (msg) api.showError(msg, model.get("error_traceback") as string);
    else api.clearError();
  }
  dismiss.addEventListener("click", () => api.clearError());
  model.on("change:error", sync);
  sync();
  return api;
}
