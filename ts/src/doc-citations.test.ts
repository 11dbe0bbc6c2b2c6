/**
 * Source comments must not cite documents the repository does not hold: a
 * newcomer following the citation would find nothing (issue 21). A citation is
 * an upper-case Markdown name such as `DESIGN.md` or a page such as
 * `docs/proxy.md`; it must name a file at the repository root, under docs/, or
 * next to the citing file.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const thisFile = fileURLToPath(import.meta.url);
const repoRoot = resolve(dirname(thisFile), "../..");
const sourceRoots = ["ts/src", "ts/bin", "python-bridge/lego_rl", "scripts"];
const skipDirs = new Set(["node_modules", "__pycache__", "dist", ".venv"]);
// Project documents: upper-case names (DESIGN.md, README.md) or pages under docs/.
// Lower-case names such as instruction.md are task files, not citations.
const citation = /(?<![\w/.-])(docs\/[\w-]+\.md|[A-Z][A-Z_-]*\.md)\b/g;

function* sourceFiles(dir: string): Generator<string> {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    if (skipDirs.has(name)) continue;
    const path = join(dir, name);
    if (path === thisFile) continue; // its comments name examples, not citations
    if (statSync(path).isDirectory()) yield* sourceFiles(path);
    else if (/\.(ts|py|sh)$/.test(name) || !name.includes(".")) yield path;
  }
}

function cited(doc: string, fromFile: string): boolean {
  return [join(repoRoot, doc), join(repoRoot, "docs", doc), join(dirname(fromFile), doc)].some(
    (p) => existsSync(p),
  );
}

describe("source comments", () => {
  it("cite only documents that are in the repository", () => {
    const missing: string[] = [];
    for (const root of sourceRoots) {
      for (const file of sourceFiles(join(repoRoot, root))) {
        const lines = readFileSync(file, "utf8").split("\n");
        lines.forEach((line, i) => {
          for (const m of line.matchAll(citation)) {
            if (!cited(m[1]!, file)) missing.push(`${file.slice(repoRoot.length + 1)}:${i + 1} ${m[1]}`);
          }
        });
      }
    }
    expect(missing).toEqual([]);
  });
});
