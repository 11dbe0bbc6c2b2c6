/**
 * No behaviour behind environment variables (issue 21): library code takes
 * typed settings; only entry points read the environment, once, into them.
 * This test fails when a source file outside the allow-list below mentions
 * `process.env` (TypeScript) or `os.environ` / `os.getenv` (Python). Test
 * files are entry points of their own and are not scanned.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** Files allowed to touch the environment, each with why. */
const ALLOWED: Record<string, string> = {
  "ts/src/cli/main.ts": "the `lego` entry point: reads the sandbox settings once (sandboxHostFromEnv)",
  "ts/src/sandbox/fixtures/hold-containers.ts": "a test fixture process: its own entry point",
  "ts/src/sandbox/fixtures/hold-quota-pool.ts": "a test fixture process: its own entry point",
  "ts/src/tasks/git.ts": "passes PATH through to git's otherwise scrubbed environment; no behaviour",
  "ts/src/demo/rl-loop.ts": "passes the environment through to the training process it starts",
  "ts/src/demo/real-loop.ts": "passes the environment through to the trainer and rollout processes it starts",
  "ts/src/proxy/bench/peers.ts": "passes the environment through to the bench peers it starts (nginx, LiteLLM)",
  "ts/src/json-line-process.ts": "passes the environment through to the child processes it starts",
  "python-bridge/lego_rl/model/tiny.py": "main() of `python -m lego_rl.model.tiny` reads LEGO_RL_QWEN3_TOKENIZER_DIR as its flag's default",
  "python-bridge/lego_rl/cluster/runtime.py": "sets (never reads) RAY_AUTH_MODE for a local Ray cluster it starts itself",
};

const roots: Array<[string, RegExp, RegExp]> = [
  ["ts/src", /\.ts$/, /\bprocess\.env\b/],
  ["python-bridge/lego_rl", /\.py$/, /\bos\.(environ|getenv)\b|\bfrom os import .*\b(environ|getenv)\b/],
];
const skipDirs = new Set(["node_modules", "__pycache__", "dist"]);

function* files(dir: string, ext: RegExp): Generator<string> {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    if (skipDirs.has(name)) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path, ext);
    else if (ext.test(name) && !/\.test\.ts$/.test(name)) yield path;
  }
}

describe("environment reads", () => {
  it("happen only in the allow-listed entry points", () => {
    const readers: string[] = [];
    for (const [root, ext, read] of roots) {
      for (const path of files(join(repoRoot, root), ext)) {
        if (read.test(readFileSync(path, "utf8"))) readers.push(relative(repoRoot, path));
      }
    }
    expect(readers.filter((path) => !(path in ALLOWED))).toEqual([]);
    // A stale entry would let a new read slip in under an old excuse.
    expect(Object.keys(ALLOWED).filter((path) => !readers.includes(path))).toEqual([]);
  });
});
