/**
 * The projects the `builtin` suite is mined from: small, permissively
 * licensed, pure Python, their sdists ship their tests, and those tests pass
 * on the sandbox base image's Python 3.11 and Debian's pytest with nothing
 * else installed and no conftest.py. Version and sha256 are pinned in
 * scripts/tasks/builtin-sdists.txt (what set-up downloads); this says how
 * each is mined. Whole projects are held out (split `test`), so evaluation
 * can measure transfer to code never trained on.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Split } from "./task.ts";

export interface MinedProject {
  /** PyPI name. */
  name: string;
  license: string;
  /** Files or folders (relative to the sdist's root) whose functions are mutated; tests never are. */
  sources: string[];
  /** Folders put on the verifier's sys.path. */
  pythonpath: string[];
  split: Split;
  /** Tasks kept at most (more tries stop once reached). */
  maxTasks: number;
}

export const BUILTIN_PROJECTS: MinedProject[] = [
  { name: "cachetools", license: "MIT", sources: ["src/cachetools"], pythonpath: ["src"], split: "train", maxTasks: 30 },
  { name: "inflection", license: "MIT", sources: ["inflection"], pythonpath: ["."], split: "train", maxTasks: 16 },
  { name: "parse", license: "MIT", sources: ["parse"], pythonpath: ["."], split: "train", maxTasks: 30 },
  { name: "six", license: "MIT", sources: ["six.py"], pythonpath: ["."], split: "train", maxTasks: 20 },
  { name: "toolz", license: "BSD-3-Clause", sources: ["toolz/dicttoolz.py", "toolz/functoolz.py", "toolz/itertoolz.py", "toolz/recipes.py", "toolz/utils.py", "toolz/sandbox/core.py"], pythonpath: ["."], split: "train", maxTasks: 40 },
  { name: "schema", license: "MIT", sources: ["schema"], pythonpath: ["."], split: "test", maxTasks: 25 },
  { name: "webcolors", license: "BSD-3-Clause", sources: ["src/webcolors"], pythonpath: ["src"], split: "test", maxTasks: 25 },
];

export const SDISTS_FILE = fileURLToPath(new URL("../../../scripts/tasks/builtin-sdists.txt", import.meta.url));

/** name → {version, sha256}, from the pinned requirements file set-up downloads with. */
export function pinnedSdists(file = SDISTS_FILE): Map<string, { version: string; sha256: string }> {
  const out = new Map<string, { version: string; sha256: string }>();
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const m = /^([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$/.exec(line.trim());
    if (m) out.set(m[1]!, { version: m[2]!, sha256: m[3]! });
  }
  return out;
}
