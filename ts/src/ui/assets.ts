/**
 * Builds the Live UI's page (web/: Preact + htm + uPlot) with Vite into a folder the server
 * serves. Set-up builds it into the default folder; built assets are never committed.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

export const WEB_SOURCE_DIR = resolve(import.meta.dirname, "web");
/** ts/build/ui: ignored by git like every build/ folder. */
export const DEFAULT_ASSETS_DIR = resolve(import.meta.dirname, "../../build/ui");

export const assetsBuilt = (dir: string) => existsSync(join(dir, "index.html"));

export async function buildUiAssets(outDir: string = DEFAULT_ASSETS_DIR): Promise<string> {
  // Vite is needed only to build, not to serve: load it on demand.
  const { build } = await import("vite");
  await build({ root: WEB_SOURCE_DIR, configFile: false, logLevel: "warn", base: "/", build: { outDir, emptyOutDir: true } });
  return outDir;
}
