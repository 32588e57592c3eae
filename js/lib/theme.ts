// Theme colours for canvas drawing, which cannot use CSS var() itself. Same rule as the
// CSS (js/lib/theme.css): JupyterLab's --jp-X when the host defines it, else vinlens's own
// --vl-X default (light or dark after prefers-color-scheme), else a literal.

/** The value of --jp-`name`, else --vl-`name`, else `literal`. */
export function themeVar(style: CSSStyleDeclaration, name: string, literal: string): string {
  return style.getPropertyValue(`--jp-${name}`).trim()
    || style.getPropertyValue(`--vl-${name}`).trim()
    || literal;
}

/** Call `cb` when JupyterLab switches theme or the browser's colour scheme changes; returns a disposer. */
export function onThemeChange(cb: () => void): () => void {
  const observer = typeof MutationObserver !== "undefined" && typeof document !== "undefined"
    ? new MutationObserver(() => cb())
    : null;
  observer?.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  const media = typeof globalThis.matchMedia === "function"
    ? globalThis.matchMedia("(prefers-color-scheme: dark)")
    : null;
  media?.addEventListener?.("change", cb);
  return () => {
    observer?.disconnect();
    media?.removeEventListener?.("change", cb);
  };
}
