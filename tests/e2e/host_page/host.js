// Renders vinlens widgets the way anywidget's front end does (default export {render} or a
// function returning it; initialize({model}) then render({model, el})), with a small model
// like js/lib/fake-model.ts fed from a real widget's state that Python exported
// (tests/e2e/host_states.py). Custom messages are recorded, never answered: the widget must
// still show its record, as in a host whose comm cannot carry them.

function revive(node) {
  if (Array.isArray(node)) return node.map(revive);
  if (node && typeof node === "object") {
    if (typeof node.$b64 === "string" && Object.keys(node).length === 1) {
      const raw = atob(node.$b64);
      const bytes = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      return new DataView(bytes.buffer);  // binary traitlets arrive as DataView
    }
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, revive(v)]));
  }
  return node;
}

class PageModel {
  constructor(state) {
    this.state = state;
    this.handlers = new Map();
    this.sent = [];
    this.saved = 0;
    this.widget_manager = { get_model: async () => { throw new Error("no widget manager on this page"); } };
  }
  get(key) { return this.state[key]; }
  set(key, value) { this.state[key] = value; this.emit(`change:${key}`); }
  on(event, cb) {
    if (!this.handlers.has(event)) this.handlers.set(event, new Set());
    this.handlers.get(event).add(cb);
  }
  off(event, cb) {
    if (!event) { this.handlers.clear(); return; }
    if (!cb) { this.handlers.delete(event); return; }
    this.handlers.get(event)?.delete(cb);
  }
  save_changes() { this.saved += 1; }
  send(content, _callbacks, buffers) { this.sent.push({ content, buffers }); }
  emit(event, ...args) { for (const cb of this.handlers.get(event) ?? []) cb(...args); }
}

const models = {};

async function mount(name) {
  const doc = await (await fetch(`./states/${name}.json`)).json();
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = `./static/${doc.bundle}.css`;
  const loaded = new Promise((resolve, reject) => { link.onload = resolve; link.onerror = reject; });
  document.head.append(link);
  await loaded;
  const mod = await import(`./static/${doc.bundle}.js`);
  const widget = typeof mod.default === "function" ? await mod.default() : mod.default;
  const model = new PageModel(revive(doc.state));
  models[name] = model;
  const cell = document.createElement("section");
  cell.className = "host-cell";
  cell.dataset.widget = name;
  const title = document.createElement("h2");
  title.textContent = doc.title;
  const el = document.createElement("div");
  el.className = "host-output";
  cell.append(title, el);
  document.getElementById("cells").append(cell);
  await widget.initialize?.({ model });
  await widget.render({ model, el });
  return doc.title;
}

window.vlHost = { mount, models };
