// Which scheme a widget takes in each host, and that it follows a live theme switch.
import { afterEach, describe, expect, it, vi } from "vitest";
import { hostScheme, markedScheme, mountRoot, onThemeChange } from "./theme";

function el(attrs: Record<string, string>, classes: string[] = []): Element {
  const node = document.createElement("div");
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.classList.add(...classes);
  return node;
}

function systemIs(scheme: "light" | "dark"): void {
  vi.stubGlobal("matchMedia", (q: string) => ({
    matches: q === "(prefers-color-scheme: dark)" && scheme === "dark",
    addEventListener: () => {},
    removeEventListener: () => {},
  }));
}

afterEach(() => {
  vi.unstubAllGlobals();
  document.body.className = "";
  for (const a of Array.from(document.body.attributes)) document.body.removeAttribute(a.name);
  for (const a of Array.from(document.documentElement.attributes)) document.documentElement.removeAttribute(a.name);
  document.body.replaceChildren();
});

describe("host theme marks", () => {
  it("reads each host's own mark", () => {
    expect(markedScheme(el({ "data-jp-theme-light": "false" }))).toBe("dark");
    expect(markedScheme(el({ "data-jp-theme-light": "true" }))).toBe("light");
    expect(markedScheme(el({}, ["vscode-dark"]))).toBe("dark");
    expect(markedScheme(el({}, ["vscode-high-contrast"]))).toBe("dark");
    expect(markedScheme(el({}, ["vscode-high-contrast-light"]))).toBe("light");
    expect(markedScheme(el({ "data-vscode-theme-kind": "vscode-light" }, ["vscode-light"]))).toBe("light");
    expect(markedScheme(el({}, ["dark", "dark-theme"]))).toBe("dark"); // marimo
    expect(markedScheme(el({ theme: "dark" }))).toBe("dark"); // Colab
    expect(markedScheme(el({ "data-theme": "light" }))).toBe("light"); // PyData Sphinx
    expect(markedScheme(el({ "data-bs-theme": "dark" }))).toBe("dark");
    expect(markedScheme(el({ "data-theme": "auto" }))).toBeNull();
    expect(markedScheme(el({}, ["cell", "output"]))).toBeNull();
  });

  it("prefers the host's mark over the browser's colour scheme, and falls back to it", () => {
    systemIs("light");
    expect(hostScheme()).toBe("light");
    document.body.classList.add("vscode-dark");
    expect(hostScheme()).toBe("dark");
    systemIs("dark");
    document.body.className = "vscode-light";
    expect(hostScheme()).toBe("light");
    document.body.className = "";
    expect(hostScheme()).toBe("dark");
    document.documentElement.setAttribute("theme", "light");
    expect(hostScheme()).toBe("light");
  });
});

describe("mountRoot", () => {
  it("marks the root and follows a live switch until disposed", async () => {
    systemIs("light");
    const host = document.createElement("div");
    document.body.append(host);
    const root = document.createElement("div");
    const stop = mountRoot(host, root);
    expect(root.parentElement).toBe(host);
    expect(root.dataset.vlScheme).toBe("light");
    const redraws = vi.fn();
    const stopRedraw = onThemeChange(redraws);
    document.body.classList.add("dark"); // marimo switches to dark
    await new Promise((r) => setTimeout(r, 50));
    expect(root.dataset.vlScheme).toBe("dark");
    expect(redraws).toHaveBeenCalledTimes(1);
    stop();
    stopRedraw();
    document.body.classList.remove("dark");
    await new Promise((r) => setTimeout(r, 50));
    expect(root.dataset.vlScheme).toBe("dark");
    expect(redraws).toHaveBeenCalledTimes(1);
  });
});
