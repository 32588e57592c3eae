// Module table widget: the registered modules of a model (vinlens/widgets/module_table.py),
// drawn by the shared component in js/lib/module-table.ts plus a Refresh command.
import type { AnyModel } from "@anywidget/types";
import "../lib/theme.css";
import { mountRoot } from "../lib/theme";
import { h } from "../lib/dom";
import { createModuleTable, type ModuleTableModel } from "../lib/module-table";
import { CommandClient } from "../lib/protocol";
import { statusView } from "../lib/status";

function render({ model, el }: { model: AnyModel<ModuleTableModel>; el: HTMLElement }): () => void {
  const status = statusView(model);
  const client = new CommandClient(model);
  const mt = createModuleTable(model, { height: 420 });
  const refresh = h("button", { class: "vl-button vl-mt-refresh", type: "button", title: "Re-inspect the model (training flags, parameters)" }, "Refresh");
  refresh.addEventListener("click", () => {
    refresh.disabled = true;
    client.request("refresh").catch((err) => status.showError(err.message, err.traceback))
      .finally(() => { refresh.disabled = false; });
  });
  mt.el.querySelector(".vl-mt-actions")?.append(refresh);
  const root = h("div", { class: "vl-root vl-module-table" }, mt.el, status.el);
  const stopScheme = mountRoot(el, root);
  return () => {
    stopScheme();
    mt.dispose();
    client.dispose();
    status.dispose();
    root.remove();
  };
}

export default { render };
