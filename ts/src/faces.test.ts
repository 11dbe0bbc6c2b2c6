/**
 * Each concern's index.ts is its face (issue 21): code in one concern reaches
 * another only through that face, so a newcomer starting at any index.ts finds
 * every public behaviour in two hops, and a concern's inner files can move
 * without breaking others. Tests and test-support files may reach inside.
 * The one exception: cli/registry.ts lists the components' `cli.ts` modules.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = import.meta.dirname;
const REPO = join(SRC, "../..");

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (name === "node_modules" || name === "fixtures") continue;
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (name.endsWith(".ts")) yield path;
  }
}

// A `*-suite.ts` is a shared test body several e2e test files run (rollout/train-suite.ts).
const isTestMaterial = (path: string) => /\.test\.ts$|test-support\.ts$|-suite\.ts$/.test(path);
const concernOf = (path: string) => relative(SRC, path).split("/")[0]!;

describe("concern faces", () => {
  it("other concerns are imported through their index.ts", () => {
    const problems: string[] = [];
    for (const file of sources(SRC)) {
      if (isTestMaterial(file)) continue;
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/from "(\.\.?\/[^"]+\.ts)"/g)) {
        const target = join(file, "..", m[1]!);
        const concern = concernOf(target);
        if (concern === concernOf(file) || !relative(SRC, target).includes("/")) continue; // own concern, or a top-level module
        if (relative(SRC, target) === `${concern}/index.ts`) continue;
        if (relative(SRC, file) === "cli/registry.ts" && relative(SRC, target) === `${concern}/cli.ts`) continue;
        problems.push(`${relative(REPO, file)} imports ${relative(REPO, target)}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it("no source file is over 600 lines (generated code aside)", () => {
    const long = [...sources(SRC)]
      .filter((f) => !f.endsWith("generated.ts"))
      .map((f) => [relative(REPO, f), readFileSync(f, "utf8").split("\n").length] as const)
      .filter(([, n]) => n > 600);
    expect(long).toEqual([]);
  });
});
