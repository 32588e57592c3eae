// Bundle every widget entry point js/widgets/<name>.ts into src/vinlens/widgets/static/<name>.js
// (ES module, as anywidget expects) and the CSS it imports into <name>.css.
// A manifest.json lists what was built; the Python build hook checks it exists.
import * as esbuild from "esbuild";
import { readdirSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { join, basename } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const entryDir = join(root, "js", "widgets");
const outdir = join(root, "src", "vinlens", "widgets", "static");
const watch = process.argv.includes("--watch");

const entries = existsSync(entryDir)
  ? readdirSync(entryDir).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"))
  : [];
if (entries.length === 0) {
  console.error(`no widget entry points found in ${entryDir}`);
  process.exit(1);
}
const entryPoints = entries.map((f) => join(entryDir, f));

mkdirSync(outdir, { recursive: true });
const options = {
  entryPoints, // a widget's `import "./x.css"` lands beside it as <name>.css
  bundle: true,
  format: "esm",
  target: "es2022",
  outdir,
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  logLevel: "info",
};
const manifest = {
  widgets: entries.map((f) => basename(f, ".ts")),
  built_at: new Date().toISOString(),
};
if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
  writeFileSync(join(outdir, "manifest.json"), JSON.stringify(manifest, null, 2));
} else {
  await esbuild.build(options);
  writeFileSync(join(outdir, "manifest.json"), JSON.stringify(manifest, null, 2));
}
