// Theme colours for canvas drawing, which cannot use CSS var() itself, and the light/dark
// choice for hosts without JupyterLab's theme. Same rule as the CSS (js/lib/theme.css):
// JupyterLab's --jp-X when the host defines it, else vinlens's own --vl-X default (light,
// or dark where `data-vl-scheme="dark"` is set on the widget's root), else a literal.

/** The value of --jp-`name`, else --vl-`name`, else `literal`. */
export function themeVar(style: CSSStyleDeclaration, name: string, literal: string): string {
  return style.getPropertyValue(`--jp-${name}`).trim()
    || style.getPropertyValue(`--vl-${name}`).trim()
    || literal;
}

export type Scheme = "light" | "dark";

// Attributes whose value is "dark" or "light": Colab (`theme`), PyData Sphinx, Bootstrap
// and others.
const VALUE_ATTRIBUTES = ["theme", "data-theme", "data-bs-theme", "data-mode", "data-color-mode"];
// Classes, checked in this order: VS Code's (light first: `vscode-high-contrast-light`
// also has no `vscode-dark`), then marimo's and Tailwind-style pages'.
const CLASS_SCHEMES: readonly (readonly [string, Scheme])[] = [
  ["vscode-light", "light"], ["vscode-high-contrast-light", "light"],
  ["vscode-dark", "dark"], ["vscode-high-contrast", "dark"],
  ["dark", "dark"], ["dark-theme", "dark"], ["theme-dark", "dark"],
  ["light", "light"], ["light-theme", "light"], ["theme-light", "light"],
];
// Everything markedScheme reads, watched on <html> and <body>.
const HOST_ATTRIBUTES = ["class", "data-vscode-theme-kind", "data-jp-theme-light", ...VALUE_ATTRIBUTES];

/**
 * The scheme an element's own marks ask for, or null. JupyterLab:
 * `data-jp-theme-light`; VS Code: `data-vscode-theme-kind` and its `vscode-*` classes;
 * then the classes and attributes above.
 */
export function markedScheme(node: Element): Scheme | null {
  const jp = node.getAttribute("data-jp-theme-light");
  if (jp === "true" || jp === "false") return jp === "true" ? "light" : "dark";
  const kind = node.getAttribute("data-vscode-theme-kind");
  if (kind) return kind === "vscode-light" || kind === "vscode-high-contrast-light" ? "light" : "dark";
  const byClass = CLASS_SCHEMES.find(([name]) => node.classList.contains(name));
  if (byClass) return byClass[1];
  for (const name of VALUE_ATTRIBUTES) {
    const value = node.getAttribute(name)?.toLowerCase();
    if (value === "dark" || value === "light") return value;
  }
  return null;
}

function systemScheme(): Scheme {
  return typeof globalThis.matchMedia === "function" && globalThis.matchMedia("(prefers-color-scheme: dark)").matches
    ? "dark"
    : "light";
}

/**
 * The scheme for widgets in `doc`: the host's mark on <body>, else on <html>, else the
 * browser's colour scheme. Only those two are read: every host above marks its theme
 * there, and a class like `light` deeper in a page means something else.
 */
export function hostScheme(doc: Document = document): Scheme {
  for (const node of [doc.body, doc.documentElement]) {
    const marked = node ? markedScheme(node) : null;
    if (marked) return marked;
  }
  return systemScheme();
}

function watchHost(cb: () => void): () => void {
  const observer = typeof MutationObserver !== "undefined" && typeof document !== "undefined"
    ? new MutationObserver(() => cb())
    : null;
  for (const node of typeof document !== "undefined" ? [document.documentElement, document.body] : []) {
    if (node) observer?.observe(node, { attributes: true, attributeFilter: HOST_ATTRIBUTES });
  }
  const media = typeof globalThis.matchMedia === "function"
    ? globalThis.matchMedia("(prefers-color-scheme: dark)")
    : null;
  media?.addEventListener?.("change", cb);
  return () => {
    observer?.disconnect();
    media?.removeEventListener?.("change", cb);
  };
}

/**
 * Append a widget's root to `el` and keep its `data-vl-scheme` on the host's scheme
 * (light or dark, see hostScheme); the --vl-* defaults of theme.css follow it. Returns
 * the disposer.
 */
export function mountRoot(el: HTMLElement, root: HTMLElement): () => void {
  el.append(root);
  const apply = () => { root.dataset.vlScheme = hostScheme(root.ownerDocument); };
  apply();
  return watchHost(apply);
}

/**
 * Call `cb` after the host switches theme (JupyterLab, VS Code, marimo, the browser's colour
 * scheme); returns a disposer. `cb` runs on the next frame, after every root's
 * `data-vl-scheme` has been updated, so colours read then are the new theme's.
 */
export function onThemeChange(cb: () => void): () => void {
  let pending = false;
  let disposed = false;
  const later = () => {
    if (pending) return;
    pending = true;
    const run = () => { pending = false; if (!disposed) cb(); };
    if (typeof requestAnimationFrame === "function") requestAnimationFrame(run);
    else setTimeout(run, 0);
  };
  const stop = watchHost(later);
  return () => { disposed = true; stop(); };
}
