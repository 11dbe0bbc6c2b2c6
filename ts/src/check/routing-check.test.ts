/**
 * `lego check --engine-address` against the real Python engine (python -m lego_rl.engine on the
 * tiny MoE model, 4 MoE layers × top-2), against a model directory whose config.json gives
 * another routing shape, and against an address where nothing listens.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const lego = (...args: string[]) => spawnSync(LEGO, ["check", "--min-free-gib", "0.1", ...args], { encoding: "utf8", timeout: 50_000 });

let dir = "";
let modelDir = "";
let server: ChildProcess | null = null;
let address = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "check-routing-"));
  modelDir = join(dir, "tiny");
  execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "bytes", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore", timeout: 110_000 });
  server = spawn(PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*", "--max-context", "512"], { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] });
  const first = await new Promise<string>((res, rej) => {
    createInterface({ input: server!.stdout! }).once("line", res);
    server!.once("exit", (code) => rej(new Error(`engine exited with ${code} before listening`)));
  });
  address = (JSON.parse(first) as { address: string }).address;
}, 150_000);

afterAll(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server!.once("exit", r));
    server.kill("SIGTERM");
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("lego check --engine-address", () => {
  it("passes when the engine returns routing of the shape config.json gives", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", modelDir, "--engine-address", address);
    expect(r.stdout).toMatch(/ok {3}routing: zmq engine returns routing \(\d+ values for \d+ tokens\)/);
    const m = /\((\d+) values for (\d+) tokens\)/.exec(r.stdout)!;
    expect(Number(m[1])).toBe(Number(m[2]) * 4 * 2);
  });

  it("fails naming the fix when the engine serves another model than --model-dir", { timeout: 60_000 }, () => {
    // Another checkpoint's config: 3 experts per token instead of 2.
    const other = join(dir, "other");
    mkdirSync(other, { recursive: true });
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(modelDir, f), join(other, f));
    const hf = JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8")) as Record<string, unknown>;
    writeFileSync(join(other, "config.json"), JSON.stringify({ ...hf, num_experts_per_tok: 3 }));
    const r = lego("--model-dir", other, "--engine-address", address);
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("not a multiple of the 12 per token config.json gives");
    expect(r.stdout).toContain("fix: the engine serves another model than --model-dir");
  });

  it("fails naming the fix when no engine listens at the address", { timeout: 60_000 }, () => {
    const r = lego("--engine-address", "tcp://127.0.0.1:9", "--engine-timeout-s", "3");
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("FAIL routing: zmq engine at tcp://127.0.0.1:9 did not serve a probe request");
    expect(r.stdout).toContain("fix: start the engine (`python -m lego_rl.engine");
  });

  it("is skipped without an engine", { timeout: 60_000 }, () => {
    expect(lego().stdout).toContain("skip routing: no --engine-address / --engine-url");
  });
});
